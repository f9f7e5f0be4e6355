"""The model layer: calling models through litellm and streaming their replies as UI chunks.

Importing this package configures litellm to stay offline (no cost-map download, bundled
tokenizers, no `.env` loading); see `durachat.models._litellm`.
"""

from durachat.models.adapter import stream_ui_chunks, to_chat_messages, warm_up
from durachat.models.errors import ModelError
from durachat.models.scripted import SCRIPTED_MODEL, register_scripted_model

__all__ = [
    "SCRIPTED_MODEL",
    "ModelError",
    "register_scripted_model",
    "stream_ui_chunks",
    "to_chat_messages",
    "warm_up",
]
