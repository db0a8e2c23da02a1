"""nagent_fs: atomic writes (mode kept, exclusive, no temp left behind), unique names, digests, stat."""
import hashlib
import os
import stat

from base import HermeticTestCase

import nagent_fs as fs
from nagent_errors import InputError


class AtomicWriteTests(HermeticTestCase):
    def setUp(self):
        super().setUp()
        self.path = os.path.join(self.tmp, "target.txt")

    def leftovers(self):
        return [name for name in os.listdir(self.tmp) if name.endswith(".tmp")]

    def test_new_file_gets_umask_mode_and_content(self):
        old = os.umask(0o027)
        try:
            self.assertEqual(fs.atomic_write(self.path, b"one"), self.path)
        finally:
            os.umask(old)
        with open(self.path, "rb") as handle:
            self.assertEqual(handle.read(), b"one")
        self.assertEqual(stat.S_IMODE(os.stat(self.path).st_mode), 0o640)
        self.assertEqual(self.leftovers(), [])

    def test_replace_keeps_mode_unless_given(self):
        fs.atomic_write(self.path, b"one", 0o751)
        fs.atomic_write(self.path, b"two", sync=False)
        self.assertEqual(stat.S_IMODE(os.stat(self.path).st_mode), 0o751)
        fs.atomic_write(self.path, memoryview(b"three"), 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(self.path).st_mode), 0o600)
        with open(self.path, "rb") as handle:
            self.assertEqual(handle.read(), b"three")

    def test_exclusive_refuses_an_existing_file(self):
        fs.atomic_write(self.path, b"first", 0o600, exclusive=True)
        with self.assertRaises(FileExistsError):
            fs.atomic_write(self.path, b"second", 0o600, exclusive=True)
        with open(self.path, "rb") as handle:
            self.assertEqual(handle.read(), b"first")
        self.assertEqual(self.leftovers(), [])

    def test_failure_leaves_old_file_and_no_temp(self):
        fs.atomic_write(self.path, b"old", 0o600)
        with self.assertRaises(TypeError):
            fs.atomic_write(self.path, "not bytes", 0o600)
        os.mkdir(os.path.join(self.tmp, "dir"))
        with self.assertRaises(OSError):
            fs.atomic_write(os.path.join(self.tmp, "dir"), b"x", 0o600)  # replace onto a directory
        with open(self.path, "rb") as handle:
            self.assertEqual(handle.read(), b"old")
        self.assertEqual(self.leftovers(), [])

    def test_swap_puts_a_new_file_in_place_whole(self):
        fs.atomic_write(self.path, b"old", 0o600)
        keep = os.path.join(self.tmp, "keep")
        os.link(self.path, keep)                 # the old inode is swapped out, never rewritten
        fs.atomic_write(self.path, b"new", 0o640, sync=False, swap=True)
        with open(self.path, "rb") as handle:
            self.assertEqual(handle.read(), b"new")
        with open(keep, "rb") as handle:
            self.assertEqual(handle.read(), b"old")
        self.assertEqual(stat.S_IMODE(os.stat(self.path).st_mode), 0o640)
        self.assertEqual(os.stat(keep).st_nlink, 1)   # the swapped-out name was unlinked
        self.assertEqual(self.leftovers(), [])
        fs.atomic_write(os.path.join(self.tmp, "fresh"), b"x", 0o600, sync=False, swap=True)
        self.assertTrue(os.path.isfile(os.path.join(self.tmp, "fresh")))
        self.assertEqual(self.leftovers(), [])

    def test_swap_never_moves_a_directory_or_follows_a_link(self):
        folder = os.path.join(self.tmp, "dir")
        os.mkdir(folder)
        with self.assertRaises(OSError):
            fs.atomic_write(folder, b"x", 0o600, sync=False, swap=True)
        self.assertTrue(os.path.isdir(folder))
        self.assertEqual(self.leftovers(), [])
        fs.atomic_write(self.path, b"target", 0o600)
        link = os.path.join(self.tmp, "link")
        os.symlink(self.path, link)
        fs.atomic_write(link, b"x", 0o600, sync=False, swap=True)   # the link itself is replaced
        self.assertFalse(os.path.islink(link))
        with open(self.path, "rb") as handle:
            self.assertEqual(handle.read(), b"target")
        self.assertEqual(self.leftovers(), [])

    def test_long_name_still_fits(self):
        path = os.path.join(self.tmp, "n" * 250)
        fs.atomic_write(path, b"x")
        self.assertTrue(os.path.isfile(path))

    def test_write_unique_numbers_taken_names(self):
        base = os.path.join(self.tmp, "side")
        paths = [fs.write_unique(base, str(n).encode()) for n in range(3)]
        self.assertEqual(paths, [base, base + "-2", base + "-3"])
        self.assertEqual(stat.S_IMODE(os.stat(base + "-3").st_mode), 0o600)


class DigestAndStatTests(HermeticTestCase):
    def test_digests_match_hashlib(self):
        data = os.urandom(3 * (1 << 20) + 17)  # several read chunks plus a tail
        path = os.path.join(self.tmp, "blob")
        with open(path, "wb") as handle:
            handle.write(data)
        expected = hashlib.sha256(data).hexdigest()
        self.assertEqual(fs.sha256_bytes(data), expected)
        self.assertEqual(fs.sha256_file(path), expected)

    def test_regular_file_stat(self):
        path = self.write_file("a.txt", "x")
        link = os.path.join(self.tmp, "link")
        os.symlink(path, link)
        real, st = fs.regular_file_stat(link)
        self.assertEqual((real, st.st_size), (os.path.realpath(path), 1))
        cases = {os.path.join(self.tmp, "missing"): ("file not found", ""),
                 self.tmp: ("is a directory, not a file", ""),
                 "/dev/null": ("not a regular file", "")}
        for target, (what, fix) in cases.items():
            with self.assertRaises(InputError) as caught:
                fs.regular_file_stat(target)
            self.assertEqual((caught.exception.what, caught.exception.value, caught.exception.fix),
                             (what, target, fix))
        with self.assertRaises(InputError) as caught:
            fs.regular_file_stat(self.tmp, ("is a directory", "give a file"))
        self.assertEqual(caught.exception.line(), f"Error: is a directory: {self.tmp} (give a file)")

    def test_file_id_is_the_inode_a_path_resolves_to(self):
        # One identity rule for the file-edit index, the split registry and write authority.
        path = self.write_file("a.txt", "x")
        link = os.path.join(self.tmp, "link")
        os.symlink(path, link)
        st = os.stat(path)
        self.assertEqual(fs.file_id(st), f"{st.st_dev}:{st.st_ino}")
        self.assertEqual(fs.file_id_for_path(link), fs.file_id(st))       # links are followed
        self.assertEqual(fs.file_id_for_path(path), fs.file_id(os.lstat(os.path.realpath(link))))
        self.assertNotEqual(fs.file_id(os.lstat(link)), fs.file_id_for_path(link))
        fs.atomic_write(path, b"y")                                       # a new inode: a new id
        self.assertNotEqual(fs.file_id_for_path(path), fs.file_id(st))
        with self.assertRaises(InputError) as caught:
            fs.file_id_for_path(self.tmp, ("is a directory", "give a file"))
        self.assertEqual(caught.exception.line(), f"Error: is a directory: {self.tmp} (give a file)")
