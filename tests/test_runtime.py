"""Run-time costs of a run (issue 25), kept as behaviour: the process ends as soon as its answer
is out (nagent_exit.exit_now) with nothing it wrote lost; the OpenAI adapter hands the
conversation to the SDK untransformed, with the same JSON body on the wire.
"""
import os
import subprocess
import sys
import textwrap

from base import HELPERS, HermeticTestCase
from fakes import FakeVendorTestCase
import nagent_conversation
import nagent_llm
from nagent_config import resolve_settings


def run_snippet(test, code, **kwargs):
    """A fresh interpreter running `code` with bin/helpers on its path."""
    script = f"import sys\nsys.path.insert(0, {HELPERS!r})\n" + textwrap.dedent(code)
    env = dict(test.env)
    env.pop("PYTHONUNBUFFERED", None)   # output stays buffered until something flushes it
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, cwd=test.cwd, timeout=60, **kwargs)


class ExitNowTest(HermeticTestCase):
    def test_flushes_runs_atexit_and_skips_teardown(self):
        proc = run_snippet(self, """
            import atexit, sys
            import nagent_exit

            class Teardown:
                def __del__(self):
                    sys.stdout.write("teardown ran\\n")

            kept = Teardown()
            atexit.register(lambda: sys.stdout.write("atexit ran\\n"))
            sys.stdout.write("answer\\n")   # buffered: a pipe
            sys.stderr.write("note")
            nagent_exit.exit_now(7)
            sys.stdout.write("not reached\\n")
        """)
        self.assertEqual(proc.returncode, 7)
        self.assertEqual(proc.stdout, "answer\natexit ran\n")
        self.assertEqual(proc.stderr, "note")

    def test_a_profiler_keeps_the_ordinary_exit(self):
        """Under cProfile (benchmarks/turns.py --profile) the profile is written at the end."""
        proc = run_snippet(self, """
            import cProfile, sys
            import nagent_exit
            profile = cProfile.Profile()
            profile.enable()
            code = nagent_exit.exit_now(4)
            profile.disable()
            print("returned", code)
        """)
        self.assertEqual(proc.stdout, "returned 4\n")

    def test_waits_for_a_running_thread_by_returning(self):
        """A non-daemon thread still working: exit_now leaves the exit to the interpreter,
        which waits for it, so what the thread writes is not cut off."""
        marker = os.path.join(self.tmp, "written")
        proc = run_snippet(self, f"""
            import threading, time
            import nagent_exit
            go = threading.Event()

            def work():
                go.wait()
                time.sleep(0.05)
                with open({marker!r}, "w") as handle:
                    handle.write("done")

            threading.Thread(target=work).start()
            code = nagent_exit.exit_now(5)
            print("returned", code, flush=True)
            go.set()
            sys.exit(code)
        """)
        self.assertEqual(proc.returncode, 5)
        self.assertEqual(proc.stdout, "returned 5\n")
        with open(marker) as handle:
            self.assertEqual(handle.read(), "done")

    def test_closed_pipe_keeps_the_ordinary_report(self):
        """stdout's reader went away: exit_now leaves the exit to the interpreter, which
        reports the broken pipe as it always did (exit 120)."""
        script = f"import sys\nsys.path.insert(0, {HELPERS!r})\n" + textwrap.dedent("""
            import sys
            import nagent_exit
            sys.stdin.readline()          # the reader has closed its end by now
            sys.stdout.write("answer\\n")
            code = nagent_exit.exit_now(0)
            sys.stderr.write(f"returned {code}\\n")
            sys.exit(code)
        """)
        env = dict(self.env)
        env.pop("PYTHONUNBUFFERED", None)   # the answer stays in the buffer until the exit
        proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                cwd=self.cwd, text=True)
        proc.stdout.close()
        _, err = proc.communicate("go\n", timeout=60)
        self.assertIn("returned 0", err)
        self.assertIn("BrokenPipeError", err)
        self.assertEqual(proc.returncode, 120)


class AnswerThenExitTest(FakeVendorTestCase):
    """A one-shot run that ends at once after its answer leaves the whole conversation."""

    def setUp(self):
        super().setUp()
        self.write_config({"provider": "openai", "retry": {"base_delay": 0, "max_delay": 0}})

    def test_conversation_complete_at_exit(self):
        self.fake.reply("<nagent-shell>echo step</nagent-shell>")
        self.fake.reply("<nagent-response>All done.</nagent-response>")
        proc = self.run_tool("nagent", "--conversation", "ends", "do it", fresh=True)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(proc.stdout, "All done.\n")
        path = os.path.join(self.home, ".nagent", "conversations", "ends")
        records = nagent_conversation.read_records(path)
        kinds = [record.kind for record in records]
        self.assertEqual(kinds.count("stats"), 2)
        self.assertEqual(kinds[-2:], ["stats", "reply"])
        self.assertIn("All done.", records[-1].body)
        with open(path, "rb") as handle:
            self.assertTrue(handle.read().endswith(b"\n"))
        runs = os.path.join(self.home, ".nagent", "run")
        self.assertEqual(os.listdir(runs) if os.path.isdir(runs) else [], [],
                         "the run file is removed before the exit")


class ForkedToolExitTest(HermeticTestCase):
    def test_forked_tool_runs_none_of_the_parents_atexit_functions(self):
        """A forked `nagent` (nagent_fork) ends through exit_now: the parent's atexit functions
        (a test zygote's clean-up, say) must not run in it."""
        marker = os.path.join(self.tmp, "atexit")
        out = os.path.join(self.tmp, "out")
        proc = run_snippet(self, f"""
            import atexit, os
            import nagent_fork
            atexit.register(lambda: open({marker!r}, "a").write(f"{{os.getpid()}}\\n"))
            files = [open(os.devnull, "rb"), open({out!r}, "wb"), open(os.devnull, "wb")]
            child = nagent_fork.fork_tool("nagent", ["--description"], dict(os.environ),
                                          os.getcwd(), files)
            child.wait(60)
            print(child.returncode, os.getpid())
        """)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        code, parent = proc.stdout.split()
        self.assertEqual(code, "0")
        with open(out) as handle:
            self.assertIn("nagent", handle.read())
        with open(marker) as handle:
            self.assertEqual(handle.read().split(), [parent])


class WireBodyTest(FakeVendorTestCase):
    """The conversation goes to the SDK as extra_body (no per-message transform): the body on
    the wire is the one the SDK builds from create(input=..., messages=...), and Gemini's the one
    it builds from typed Contents."""

    def settings(self, provider, **config):
        self.write_config(dict({"retry": {"base_delay": 0, "max_delay": 0}}, **config))
        return resolve_settings({"provider": provider}, self.env)

    def request(self):
        return nagent_llm.Request(
            messages=(nagent_llm.Message("user", ("static context", "first prompt")),
                      nagent_llm.Message("assistant", ("<nagent-shell>ls</nagent-shell>",)),
                      nagent_llm.Message("user", ("result \u00e9\u4e2d",))),
            stop=("\n<system>",), cache_key="conv-key")

    def bodies(self, settings, direct):
        self.fake.reply("ok")
        self.fake.reply("ok")
        nagent_llm.generate(self.request(), settings, sleep=lambda s: None)
        client = nagent_llm.make_client(settings)
        with self.patched_environ():
            direct(client)
        return [record["json"] for record in self.fake.requests[-2:]]

    def test_responses_body_unchanged(self):
        settings = self.settings("openai")
        ours, theirs = self.bodies(settings, lambda client: list(client.responses.create(
            stream=True, model=settings.model, input=[
                {"role": "user", "content": "static context\n\nfirst prompt"},
                {"role": "assistant", "content": "<nagent-shell>ls</nagent-shell>"},
                {"role": "user", "content": "result \u00e9\u4e2d"}],
            max_output_tokens=settings.llm.max_output_tokens, store=False,
            prompt_cache_key="conv-key")))
        self.assertEqual(ours, theirs)

    def test_chat_body_unchanged(self):
        settings = self.settings("local", providers={"local": {
            "base_url": self.fake.url + "/v1", "model": "qwen3"}})
        ours, theirs = self.bodies(settings, lambda client: list(client.chat.completions.create(
            stream=True, stream_options={"include_usage": True}, model="qwen3", messages=[
                {"role": "user", "content": "static context\n\nfirst prompt"},
                {"role": "assistant", "content": "<nagent-shell>ls</nagent-shell>"},
                {"role": "user", "content": "result \u00e9\u4e2d"}],
            max_tokens=settings.llm.max_output_tokens, stop=["\n<system>"])))
        self.assertEqual(ours, theirs)


    def test_google_body_unchanged(self):
        from google.genai import types
        settings = self.settings("google")
        empty = nagent_llm.Request(messages=self.request().messages + (
            nagent_llm.Message("assistant", ("",)), nagent_llm.Message("user", ("next",))),
            stop=("\n<system>",))
        self.fake.reply("ok")
        self.fake.reply("ok")
        nagent_llm.generate(empty, settings, sleep=lambda s: None)
        client = nagent_llm.make_client(settings)
        with self.patched_environ():
            list(client.sdk.models.generate_content_stream(
                model=settings.model, contents=[
                    types.Content(role="user", parts=[types.Part(text="static context\n\nfirst prompt")]),
                    types.Content(role="model", parts=[types.Part(text="<nagent-shell>ls</nagent-shell>")]),
                    types.Content(role="user", parts=[types.Part(text="result \u00e9\u4e2d")]),
                    types.Content(role="model", parts=[types.Part(text="(empty)")]),
                    types.Content(role="user", parts=[types.Part(text="next")])],
                config=types.GenerateContentConfig(max_output_tokens=settings.llm.max_output_tokens,
                                                   stop_sequences=["\n<system>"])))
        ours, theirs = [record["json"] for record in self.fake.requests[-2:]]
        self.assertEqual(ours, theirs)
        self.assertEqual(len(ours["contents"]), 5)


class StreamReadTest(FakeVendorTestCase):
    """Streams are read as JSON server-sent events (nagent_llm.sse_events), not as the SDKs'
    typed objects; what a stream says reads as it did through the SDK."""

    def settings(self, provider="openai"):
        self.write_config({"retry": {"base_delay": 0, "max_delay": 0, "max_attempts": 1}})
        return resolve_settings({"provider": provider}, self.env)

    def test_event_framing(self):
        lines = [": a comment", "event: one", "data: {\"a\":", "data:1}", "", "", "id: 7",
                 "event:ping", "", "data: last"]
        self.assertEqual(list(nagent_llm.sse_events(iter(lines))),
                         [("one", '{"a":\n1}'), ("ping", ""), (None, "last")])

    def test_error_payload_in_a_stream(self):
        self.fake.fault(200, headers={"Content-Type": "text/event-stream"},
                        body=b'data: {"error": {"message": "the model is overloaded", '
                             b'"type": "server_error"}}\n\n')
        with self.assertRaises(nagent_llm.ProviderError) as caught:
            nagent_llm.generate(nagent_llm.text_request("hi"), self.settings(),
                                sleep=lambda s: None)
        self.assertIn("the model is overloaded", caught.exception.line())

    def test_incomplete_reply_and_usage(self):
        self.fake.reply("a partial answ", finish="length",
                        usage={"input": 12, "cache_read": 4, "output": 3, "reasoning": 1})
        deltas = []
        result = nagent_llm.generate(nagent_llm.text_request("hi"), self.settings(),
                                     sleep=lambda s: None, on_text=deltas.append)
        self.assertEqual(("".join(deltas), result.text), ("a partial answ", "a partial answ"))
        self.assertEqual((result.finish_reason, result.input_tokens, result.cache_read_tokens,
                          result.output_tokens, result.reasoning_tokens),
                         ("length", 16, 4, 4, 1))
        self.assertTrue(result.streamed)

    def test_anthropic_error_event_in_a_stream(self):
        self.fake.fault(200, headers={"Content-Type": "text/event-stream"},
                        body=b'event: error\ndata: {"type": "error", "error": {"type": '
                             b'"overloaded_error", "message": "Overloaded"}}\n\n')
        with self.assertRaises(nagent_llm.ProviderError) as caught:
            nagent_llm.generate(nagent_llm.text_request("hi"), self.settings("anthropic"),
                                sleep=lambda s: None)
        self.assertIn("Overloaded", caught.exception.line())
        self.assertEqual(caught.exception.status, 200)

    def test_anthropic_stop_sequence_and_usage(self):
        self.fake.reply("partial", finish="stop_sequence",
                        usage={"input": 5, "cache_read": 100, "cache_write": 20, "output": 1})
        deltas = []
        request = nagent_llm.Request(messages=(nagent_llm.Message("user", ("hi",)),),
                                     stop=("\n<system>",))
        result = nagent_llm.generate(request, self.settings("anthropic"), sleep=lambda s: None,
                                     on_text=deltas.append)
        self.assertEqual(("".join(deltas), result.text), ("partial", "partial"))
        self.assertEqual((result.finish_reason, result.stop_sequence, result.input_tokens,
                          result.cache_read_tokens, result.cache_write_tokens),
                         ("stop_sequence", "\n<system>", 125, 100, 20))


class PreloadTest(HermeticTestCase):
    def test_a_failed_background_import_is_reported_by_the_code_that_needs_it(self):
        import importlib
        import nagent_preload
        folder = os.path.join(self.tmp, "mods")
        os.makedirs(folder)
        with open(os.path.join(folder, "nagent_rt_broken.py"), "w") as handle:
            handle.write("raise RuntimeError('broken on import')\n")
        sys.path.insert(0, folder)
        self.addCleanup(sys.path.remove, folder)
        self.addCleanup(sys.modules.pop, "nagent_rt_broken", None)
        nagent_preload.preload(("nagent_rt_broken", "json")).join()   # nothing raised here
        with self.assertRaisesRegex(RuntimeError, "broken on import"):
            importlib.import_module("nagent_rt_broken")


class GeminiReplyModelsTest(HermeticTestCase):
    """The Gemini SDK builds its pydantic reply models on the first reply (45-60 ms, the run's
    first step). The adapter builds them while the first request is on the wire: between the
    HTTP client's request and response hooks, when the main thread does no pydantic work of
    its own (the SDK's deferred models are not safe to build from two threads at once)."""

    SCRIPT = """
        import os, time
        sys.path.insert(0, {tests!r})
        from fakes import FakeVendor
        from nagent_config import resolve_settings
        import nagent_llm
        from google.genai import types

        fake = FakeVendor().start()
        os.environ.update(fake.env())
        seen = []

        def answer(record):
            time.sleep(0.5)   # a model's time to its first token
            seen.append(types.GenerateContentResponse.__pydantic_complete__)
            return "ok"
        fake.reply_fn(answer)
        settings = resolve_settings({{"provider": "google"}}, dict(os.environ))
        before = types.GenerateContentResponse.__pydantic_complete__
        client = nagent_llm.make_client(settings)
        first = nagent_llm.generate(nagent_llm.text_request("hi"), settings, client=client)
        second = nagent_llm.generate(nagent_llm.text_request("again"), settings, client=client)
        listed = nagent_llm.list_models(settings)["models"]
        fake.stop()
        print(before, seen, first.text, second.text, bool(listed))
    """

    def test_reply_models_are_built_while_the_first_request_is_out(self):
        from base import REPO
        proc = run_snippet(self, self.SCRIPT.format(tests=os.path.join(REPO, "tests")))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        # Not built at start (deferred), built by the time the first answer is sent.
        self.assertEqual(proc.stdout.split(), ["False", "[True,", "True]", "ok", "ok", "True"],
                         proc.stderr)
