"""nagent-llm-upload: classification, local checks before any network call, and per-provider
request shapes through the real SDKs against the fake vendors."""
import base64
import json
import os

from base import HermeticTestCase
from fakes import FakeVendorTestCase

from nagent_errors import InputError
from nagent_upload import MAX_UPLOAD_BYTES, classify_upload

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
PDF = b"%PDF-1.7\n%fake\n"
ZIP = b"PK\x03\x04" + b"\x00" * 26


class ClassifyTest(HermeticTestCase):
    def make(self, name, data):
        return self.write_file(name, data, mode="wb")

    def test_categories(self):
        cases = {"a.png": (PNG, "image", "image/png"), "b.jpg": (b"\xff\xd8\xff\xe0" + b"0" * 8, "image",
                                                                "image/jpeg"),
                 "c.gif": (b"GIF89a....", "image", "image/gif"),
                 "d.webp": (b"RIFF\x00\x00\x00\x00WEBPVP8 ", "image", "image/webp"),
                 "e.pdf": (PDF, "pdf", "application/pdf"), "f.docx": (ZIP, "office", None),
                 "g.odt": (ZIP, "office", None), "h.csv": (b"a,b\n1,2\n", "text", "text/csv"),
                 "i.py": (b"print('hi')\n", "text", "text/plain"), "j.md": ("# Tïtle\n".encode(), "text",
                                                                          "text/markdown"),
                 "noext": (b"plain words\n", "text", "text/plain")}
        for name, (data, category, mime) in cases.items():
            attachment = classify_upload(self.make(name, data))
            self.assertEqual(attachment.category, category, name)
            if mime:
                self.assertEqual(attachment.mime, mime, name)

    def test_rejections(self):
        big = self.make("big.txt", b"")
        os.truncate(big, MAX_UPLOAD_BYTES + 1)
        cases = {"x.zip": ZIP, "x.tar.gz": b"\x1f\x8b\x08", "x.7z": b"7z\xbc\xaf\x27\x1c",
                 "x.rar": b"Rar!\x1a\x07\x00", "x.xz": b"\xfd7zXZ\x00", "x.bz2": b"BZh91AY",
                 "fake.png": ZIP, "renamed.txt": b"\x1f\x8b\x08\x00", "blob.bin": b"\x00\x01\x02\xff"}
        paths = [self.make(name, data) for name, data in cases.items()] + [big, "missing.png", self.cwd]
        for path in paths:
            with self.assertRaises(InputError, msg=path):
                classify_upload(path)


class UploadCliTest(FakeVendorTestCase):
    def setUp(self):
        super().setUp()
        self.write_config({"retry": {"base_delay": 0}})

    def test_rejections_make_no_request(self):
        self.write_file("a.zip", ZIP, mode="wb")
        big = self.write_file("big.pdf", b"", mode="wb")
        os.truncate(big, MAX_UPLOAD_BYTES + 10)
        for args, text in ((["--file", "a.zip"], "archives are not accepted"),
                           (["--file", "big.pdf"], "50 MB"), (["--file", "nope.png"], "file not found")):
            proc = self.run_tool("nagent-llm-upload", *args, "--prompt", "look")
            self.assertCleanError(proc, 6, text)
        self.assertEqual(self.fake.requests, [])

    def test_image_and_pdf_per_provider(self):
        self.write_file("a.png", PNG, mode="wb")
        self.write_file("r.pdf", PDF, mode="wb")
        self.fake.reply("an image", vendor="openai")
        proc = self.run_tool("nagent-llm-upload", "--file", "a.png", "--prompt", "what?", "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        data = json.loads(proc.stdout)
        self.assertEqual((data["text"], data["file"]["category"]), ("an image", "image"))
        parts = self.fake.requests_for("openai")[-1]["json"]["input"][0]["content"]
        self.assertEqual(parts[0]["type"], "input_image")
        self.assertTrue(parts[0]["image_url"].startswith("data:image/png;base64,"))
        self.assertEqual(parts[-1], {"type": "input_text", "text": "what?"})

        proc = self.run_tool("nagent-llm-upload", "--file", "r.pdf", "--prompt", "sum", "--provider",
                             "anthropic")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        block = self.fake.requests_for("anthropic")[-1]["json"]["messages"][0]["content"][0]
        self.assertEqual((block["type"], block["source"]["media_type"]), ("document", "application/pdf"))
        self.assertEqual(base64.b64decode(block["source"]["data"]), PDF)

        proc = self.run_tool("nagent-llm-upload", "--file", "a.png", "--prompt", "see", "--provider",
                             "gemini")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        parts = self.fake.requests_for("google")[-1]["json"]["contents"][0]["parts"]
        inline = parts[0].get("inlineData") or parts[0]["inline_data"]
        self.assertEqual(inline.get("mimeType") or inline.get("mime_type"), "image/png")

    def test_office_document_not_taken_by_anthropic(self):
        self.write_file("d.docx", ZIP, mode="wb")
        proc = self.run_tool("nagent-llm-upload", "--file", "d.docx", "--prompt", "x", "--provider",
                             "anthropic")
        self.assertCleanError(proc, 6, "anthropic cannot take this file type")
        self.assertIn("PDF", proc.stderr)
        self.assertEqual(self.fake.requests_for("anthropic"), [])

    def test_text_file_sent_as_text(self):
        self.write_file("n.csv", "a,b\n1,2\n")
        proc = self.run_tool("nagent-llm-upload", "--file", "n.csv", "--prompt", "rows?", "--provider",
                             "google")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        parts = self.fake.requests_for("google")[-1]["json"]["contents"][0]["parts"]
        self.assertIn("a,b\n1,2", parts[0]["text"])
