"""The one containment rule and the state-directory names (nagent_paths)."""
import os

from base import HermeticTestCase

import nagent_paths as paths
from nagent_errors import ConfigError


class WithinTest(HermeticTestCase):
    def test_whole_components_only(self):
        self.assertTrue(paths.within("/tmp/a", "/tmp"))
        self.assertTrue(paths.within("/tmp/a/b", "/tmp/"))
        self.assertFalse(paths.within("/tmpx/a", "/tmp"))
        self.assertFalse(paths.within("/tmp", "/tmp"))
        self.assertTrue(paths.within("/tmp", "/tmp", inclusive=True))
        self.assertFalse(paths.within("/", "/"))
        self.assertTrue(paths.within("/etc/passwd", "/"))

    def test_real_within_resolves_links_and_dots(self):
        os.makedirs(os.path.join(self.tmp, "root", "in"))
        os.symlink("/etc", os.path.join(self.tmp, "root", "escape"))
        root = os.path.join(self.tmp, "root")
        self.assertTrue(paths.real_within(os.path.join(root, "in", "f"), root))
        self.assertFalse(paths.real_within(os.path.join(root, "escape", "passwd"), root))
        self.assertFalse(paths.real_within(os.path.join(root, "in", "..", "..", "x"), root))

    def test_within_any(self):
        self.assertTrue(paths.within_any("/var/tmp/x", ("/tmp", "/var/tmp")))
        self.assertFalse(paths.within_any("/var/x", ("/tmp", "/var/tmp")))


class StateDirsTest(HermeticTestCase):
    def test_dirs_follow_home(self):
        self.assertEqual(paths.nagent_home(self.env), os.path.join(self.home, ".nagent"))
        self.assertEqual(paths.conversations_dir(self.env),
                         os.path.join(self.home, ".nagent", "conversations"))

    def test_relative_home_is_a_config_error(self):
        with self.assertRaises(ConfigError):
            paths.nagent_home(dict(self.env, HOME="relative/home"))
