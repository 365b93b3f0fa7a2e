"""Starting one of rcuda's own modules in a child process (python -m),
so that a source checkout in the current directory never stands in for the
installed rcuda."""
from __future__ import annotations

import sys


def python_module_command(module: str, python: str | None = None) -> list[str]:
    """The command that runs `module` (python -m MODULE) with nothing imported
    from the current directory, so that a source checkout there never stands
    in for the installed rcuda: -P on Python >= 3.11; on an older Python (or
    another interpreter than this one, of unknown version) sys.path[0] is
    dropped before the module runs, as -P does."""
    if python is None or python == sys.executable:
        python = sys.executable
        if sys.version_info >= (3, 11):
            return [python, "-P", "-m", module]
    return [python, "-c", "import runpy, sys\nif sys.path[:1] == ['']: del sys.path[0]\n"
                          f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n"]
