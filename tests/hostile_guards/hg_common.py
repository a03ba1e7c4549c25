"""What every hostile guard module here shares: its state folder (HG_DIR, where it notes what it
did for the test to read) and the answer it gives when it behaves."""

import os
from pathlib import Path

DIR = Path(os.environ["HG_DIR"])
ALLOW = '{"malicious_user_request": false, "third_party_attack": false, "current_action_harmfulness": 0}'


def once(name: str) -> bool:
    """True for the first caller of any process: a file made with O_EXCL."""
    try:
        fd = os.open(DIR / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True


def note(name: str, value: object) -> None:
    (DIR / name).write_text(str(value))
