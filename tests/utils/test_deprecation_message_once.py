"""A deprecated 1.x call prints its message once (RLlib 1.11 logs it once).

``deprecation_warning`` raises a DeprecationWarning that the warnings filters
show where they show one (code in ``__main__``, pytest, ``-W default``) and
logs the message where they hide it (library code), never both.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlpolicy.utils.deprecation import deprecation_warning

ROOT = Path(__file__).resolve().parents[2]
MSG = "`OldThing` has been deprecated. Use `NewThing` instead."


def _stderr(code, *flags):
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    )
    env.pop("PYTHONWARNINGS", None)
    proc = subprocess.run(
        [sys.executable, *flags, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    return proc.returncode, proc.stderr


CALL_FROM_MAIN = """
    import logging
    logging.basicConfig()
    from rlpolicy.utils.deprecation import deprecation_warning
    def register_variables():  # the deprecated method; its caller is in __main__
        deprecation_warning(old="OldThing", new="NewThing")
    register_variables()
"""

CALL_FROM_LIBRARY = """
    import logging, types
    logging.basicConfig()
    lib = types.ModuleType("some_library")
    exec("from rlpolicy.utils.deprecation import deprecation_warning\\n"
         "def user():\\n    old()\\n"
         "def old():\\n    deprecation_warning(old='OldThing', new='NewThing')\\n", lib.__dict__)
    lib.user()
"""


def test_called_from_main_the_warning_shows_once():
    rc, err = _stderr(CALL_FROM_MAIN)
    assert rc == 0 and err.count(MSG) == 1, err
    assert "DeprecationWarning" in err


def test_called_from_a_library_the_log_line_shows_once():
    rc, err = _stderr(CALL_FROM_LIBRARY)
    assert rc == 0 and err.count(MSG) == 1, err
    assert "WARNING:rlpolicy.utils.deprecation" in err


def test_error_filter_still_raises():
    rc, err = _stderr(CALL_FROM_MAIN, "-W", "error::DeprecationWarning")
    assert rc != 0 and "DeprecationWarning: " + MSG in err


def test_pytest_warns_sees_it():
    with pytest.warns(DeprecationWarning, match="OldThing"):
        deprecation_warning(old="OldThing", new="NewThing")
