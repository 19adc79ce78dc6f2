"""`python -m hearth`: the chat window (the same as the `hearth` command)."""
from hearth.app.main import main

if __name__ == "__main__":
    raise SystemExit(main())
