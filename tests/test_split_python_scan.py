"""The Python boundary scan reads as tokenize reads, whichever way it runs (issue 25, split):
the regex reading (nagent_split_pylines.scan_lines) either finds exactly what the tokenize
reading (nagent_split_python.scan_exact) finds, or steps aside. Generated inputs: corners of
tokenize's rules, random well-formed modules, their mutants and fragment soups
(tests/split_python_inputs.py); the corpus-wide check is benchmarks/split_identity.py."""
import os

from base import HermeticTestCase, TESTS

import nagent_split_python as py
import split_python_inputs as gen
from nagent_split_pylines import scan_lines
from nagent_split_scan import Builder
from nagent_splitters import BOM

ARRAYS = ("cand_pos", "cand_level", "attach_pos", "attach_level", "mask_start", "mask_end",
          "mask_kind")


def structure(builder):
    return {name: list(getattr(builder, name)) for name in ARRAYS}


def both_readings(data):
    """(the regex reading or None when it steps aside, the tokenize reading)."""
    skip = len(BOM) if data.startswith(BOM) else 0
    fast, exact = Builder(len(data)), Builder(len(data))
    answered = scan_lines(data, skip, fast)
    py.scan_exact(data, skip, exact)
    return (structure(fast) if answered else None), structure(exact)


class PythonScanTest(HermeticTestCase):
    def assertSameReading(self, inputs, least_answered):
        answered = 0
        for name, data in inputs:
            fast, exact = both_readings(data)
            if fast is not None:
                answered += 1
                self.assertEqual(fast, exact, name)
        # Stepping aside is always exact: the check only means something if it answers.
        self.assertGreaterEqual(answered, least_answered)

    def test_corners_of_tokenize_read_the_same(self):
        self.assertSameReading(gen.edge_cases(), 25)

    def test_generated_modules_and_their_mutants_read_the_same(self):
        modules = gen.modules(25, 250)
        self.assertSameReading(modules + gen.mutants(modules[:40], 26, 250), 150)

    def test_fragment_soups_read_the_same(self):
        self.assertSameReading(gen.soups(27, 200), 0)

    def test_real_modules_take_the_regex_reading(self):
        golden = os.path.join(TESTS, "golden", "split", "python", "input.py")
        with open(golden, "rb") as handle:
            module = handle.read()
        with open(os.path.join(os.path.dirname(os.__file__), "textwrap.py"), "rb") as handle:
            stdlib = handle.read()
        variants = [module, stdlib, BOM + module, module.replace(b"\n", b"\r\n"),
                    module.replace(b"    ", b"\t"), module.rstrip(b"\n"),
                    b"x = " + b"(" * 30 + b"1" + b")" * 30 + b"\n" + module]
        for data in variants:
            fast, exact = both_readings(data)
            self.assertIsNotNone(fast, data[:60])
            self.assertEqual(fast, exact)
            self.assertGreater(len(fast["cand_pos"]), 5)
