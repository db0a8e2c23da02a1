"""The layering rules of architecture.md, read from the source of bin/helpers (no process runs).

* Imports show dependencies: a function-local import of one of the project's own modules is
  allowed only in the dispatch modules (DISPATCH: nagent_main*, the *_commands modules, nagent_cli,
  nagent_session, nagent_config_checks, nagent_loop), where lazy loading keeps start-up low; every other module imports its own
  dependencies at the top.
* Typed data below the command line: only the command layer (COMMAND_LAYER) reads the parsed
  command line as a mapping. A function anywhere else that takes an `options` or `args`
  parameter never reads it with `.get(...)` or `["name"]`: it gets typed fields
  (nagent_invocation.Invocation's Selection, origin, overrides) or Settings.
* No import cycles among the modules of bin/helpers (function-local imports count).
The two allowlists live here, once; `offences(helpers)` is what each test checks, so a test can
be pointed at another tree.
"""
import ast
import os
import re
import unittest

from base import HELPERS

DISPATCH = re.compile(r"^nagent_main.*$|^.*_commands$|^nagent_cli$|^nagent_session$|"
                      r"^nagent_config_checks$|^nagent_loop$")
COMMAND_LAYER = re.compile(r"^nagent_main.*$|^.*_commands$|^nagent_cli$|^nagent_interactive$|"
                           r"^nagent_invocation$")
RAW_NAMES = ("options", "args")


def modules(helpers=HELPERS):
    """{module name: parsed AST} of every module in bin/helpers."""
    found = {}
    for name in sorted(os.listdir(helpers)):
        if name.endswith(".py"):
            with open(os.path.join(helpers, name), encoding="utf-8") as handle:
                found[name[:-3]] = ast.parse(handle.read(), name)
    return found


def imported(node):
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
        return [node.module]
    return []


def local_imports(trees):
    """["module:line -> imported"] of function-local imports of own modules outside DISPATCH."""
    found = []
    for name, tree in trees.items():
        if DISPATCH.match(name):
            continue
        for function in ast.walk(tree):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(function):
                    found += [f"{name}:{node.lineno} -> {target}" for target in imported(node)
                              if target in trees]
    return sorted(set(found))


def raw_option_reads(trees):
    """["module:line function(param)"] where a function below the command layer reads an
    `options`/`args` parameter as a mapping."""
    found = []
    for name, tree in trees.items():
        if COMMAND_LAYER.match(name):
            continue
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            params = {arg.arg for arg in function.args.args + function.args.kwonlyargs
                      + function.args.posonlyargs} & set(RAW_NAMES)
            for node in ast.walk(function):
                target = None
                if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
                        and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
                    target = node.value.id   # options["pid"]; a list's args[i] is no command line
                elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                      and node.func.attr == "get" and isinstance(node.func.value, ast.Name)):
                    target = node.func.value.id
                if target in params:
                    where = getattr(function, "name", "lambda")
                    found.append(f"{name}:{node.lineno} {where}({target})")
    return sorted(set(found))


def cycles(trees):
    """Sorted groups of modules that import each other (directly or not)."""
    edges = {name: {target for node in ast.walk(tree) for target in imported(node)
                    if target in trees and target != name} for name, tree in trees.items()}

    def reach(start):
        seen, todo = set(), [start]
        while todo:
            for target in edges[todo.pop()]:
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        return seen

    reached = {name: reach(name) for name in trees}
    return sorted({" <-> ".join(sorted(other for other in reached[name] if name in reached[other]))
                   for name in trees if name in reached[name]})


class LayerRulesTest(unittest.TestCase):
    trees = None

    @classmethod
    def setUpClass(cls):
        cls.trees = modules()

    def test_library_modules_import_their_own_dependencies_at_the_top(self):
        self.assertEqual(local_imports(self.trees), [],
                         "import these at the top of the module, or make the graph lighter")

    def test_no_module_below_the_command_layer_reads_the_raw_command_line(self):
        self.assertEqual(raw_option_reads(self.trees), [],
                         "pass typed fields of nagent_invocation.Invocation or Settings instead")

    def test_no_import_cycles(self):
        self.assertEqual(cycles(self.trees), [])

    def test_the_checks_see_what_they_look_for(self):
        # Each check, on a module written to break its rule, names it: none passes vacuously.
        bad = {"nagent_lib": ast.parse("import nagent_other\n"
                                       "def f(options):\n    import nagent_other\n"
                                       "    return options.get('pid'), options['conversation']\n"),
               "nagent_other": ast.parse("def g():\n    import nagent_lib\n"),
               "nagent_x_commands": ast.parse("def h(options):\n    import nagent_lib\n"
                                              "    return options['pid']\n")}
        self.assertEqual(local_imports(bad), ["nagent_lib:3 -> nagent_other",
                                              "nagent_other:2 -> nagent_lib"])
        self.assertEqual(raw_option_reads(bad), ["nagent_lib:4 f(options)"])
        self.assertEqual(cycles(bad), ["nagent_lib <-> nagent_other"])


if __name__ == "__main__":
    unittest.main()
