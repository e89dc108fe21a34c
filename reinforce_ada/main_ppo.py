"""``python -m reinforce_ada.main_ppo``: verl's PPO trainer with Reinforce-Ada; see
:mod:`reinforce_ada.integration.main_ppo`."""

from reinforce_ada.integration.main_ppo import main

if __name__ == "__main__":
    main()
