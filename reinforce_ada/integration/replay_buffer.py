"""verl V1 replay buffer that adds the adaptive rollout's metrics to each training step.

The V1 trainer discards whatever the rollout manager returns, but merges the metrics that its
replay buffer's ``sample`` returns into the step's metrics. verl builds a custom buffer from
``trainer.v1.sampler.custom_sampler.{path,name}``; the adaptive rollout sets these to this class.
Sampling itself is verl's: by the time the buffer is read, the rollout has already left exactly
the kept samples in TransferQueue. The buffer also hands the trainer's refill function to the rollout,
which uses it to replace the prompts it skips (``reinforce_ada.skip``).
"""

from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

from reinforce_ada.integration.handover import offer_refill, pop_step_metrics


class ReinforceAdaReplayBuffer(ReplayBuffer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        offer_refill(self.refill_fn)

    def sample(self, global_steps: int, partition_id: str, batch_size: int):
        batch, metrics = super().sample(global_steps, partition_id, batch_size)
        if partition_id == "train":
            metrics = {**metrics, **pop_step_metrics()}
        return batch, metrics
