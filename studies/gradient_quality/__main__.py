"""``python -m studies.gradient_quality``: measures each method's update (:mod:`studies.gradient_quality.measure`)."""

from studies.gradient_quality.measure import main

if __name__ == "__main__":
    main()
