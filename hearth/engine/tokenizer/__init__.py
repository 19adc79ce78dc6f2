"""The tokenizer: a GGUF model's vocabulary as a `tokenizers` pipeline, matching llama.cpp's ids.

- tokenizer.py: `Tokenizer` (encode, decode, `stream_decoder`) and `StreamDecoder`;
- vocab.py: `Vocab`, the vocabulary, scores and token attributes read from the GGUF metadata;
- pretokenizers.py: llama.cpp's pre-tokenizer table (`tokenizer.ggml.pre` name -> split regexes);
- pipeline.py: `make_hf_tokenizer`, the `tokenizers` pipeline built from the vocabulary.
"""

from .pretokenizers import SUPPORTED_PRE_TOKENIZERS
from .tokenizer import StreamDecoder, Tokenizer

__all__ = ["SUPPORTED_PRE_TOKENIZERS", "StreamDecoder", "Tokenizer"]
