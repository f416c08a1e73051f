"""What the teacher is told when submissions run outside the sandbox: as whom they run and
what they can reach (printed by ``grade`` and Gradescope's ``run_autograder``)."""
from __future__ import annotations

# The flag a teacher passes to let submissions run as root when no unprivileged user can run them.
ALLOW_ROOT_FLAG = "--allow-root-runs"


def unsandboxed_warnings(run) -> list:
    """Lines for the teacher: as whom unsandboxed submissions run, and what they can reach."""
    if run.runs_as == "root":
        return [f"WARNING: submissions run without the sandbox AS ROOT, as asked "
                f"({ALLOW_ROOT_FLAG}): they could not run as an unprivileged user "
                f"({run.unprivileged_reason}); their code can read and change anything on "
                f"this machine"]
    return [f"WARNING: submissions run as an unprivileged user, who can {how} {path}: make it "
            f"unreachable by other users (chmod o-rwx on its folder)" for path, how in run.exposed]
