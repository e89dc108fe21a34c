"""``python -m reinforce_ada.demo``: see :mod:`reinforce_ada.demo.run`."""

from reinforce_ada.demo.run import main

if __name__ == "__main__":
    main()
