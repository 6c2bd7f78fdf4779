"""What decides that TensorFlow must not start in a server process: the session's JIT, or the JIT's
library already in the process (the database's side is tests/test_privileges.py)."""

from gpcnn.kernel import server_guard

MAPS = """\
7f00 r-xp 00000000 08:01 12 /usr/lib/postgresql/15/lib/plpython3.so
7f10 r-xp 00000000 08:01 13 /usr/lib/postgresql/15/lib/llvmjit.so
"""


def test_a_session_that_may_jit_is_refused():
    assert server_guard.refuses(jit_in_use=True, maps="")


def test_a_process_that_has_run_the_jit_is_refused_whatever_the_setting():
    assert server_guard.refuses(jit_in_use=False, maps=MAPS)


def test_a_session_without_jit_goes_on():
    assert not server_guard.refuses(jit_in_use=False, maps=MAPS.splitlines()[0])


def test_outside_the_database_nothing_is_checked():
    server_guard.before_tensorflow()
    server_guard.after_tensorflow()


def test_the_provider_is_looked_for_beside_the_servers_plpython():
    path = server_guard.provider_path(MAPS, "llvmjit")
    assert path == "/usr/lib/postgresql/15/lib/llvmjit.so"
    assert server_guard.provider_path("", "llvmjit") is None
