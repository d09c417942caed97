"""engine.tokenizer: the same ids as Hugging Face's tokenizers, decode, and the chat template."""
import pytest
from tokenizers import Tokenizer as HfTokenizer

from conftest import DEMO, small_engine_kwargs
from miniinfer.engine.llm_engine import LLMEngine

TEXTS = ["Hello, how are you?", "The capital of France is", "  spaces\tand\nnewlines ",
         "émigré café 北京 🙂", "<|im_start|>user\nHi<|im_end|>"]


def test_encode_decode_match_hugging_face(demo_engine):
    hf = HfTokenizer.from_file(f"{DEMO}/tokenizer.json")
    tok = demo_engine.tokenizer
    for text in TEXTS:
        ids = tok.encode(text)
        assert ids == hf.encode(text).ids, text
        assert tok.decode(ids) == hf.decode(ids, skip_special_tokens=False)
        assert tok(text)["input_ids"] == ids
    assert tok.decode(tok.encode("<|im_end|>x"), skip_special_tokens=True) == "x"
    assert tok.vocab_size == 151936 and 151645 in tok.eos_token_ids


def test_apply_chat_template(demo_engine):
    tok = demo_engine.tokenizer
    chat = [{"role": "user", "content": "Hi"}]
    text = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False,
                                   enable_thinking=False)
    assert text == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert tok.apply_chat_template(chat, tokenize=False) == "<|im_start|>user\nHi<|im_end|>\n"
    assert tok.apply_chat_template(chat) == tok.encode("<|im_start|>user\nHi<|im_end|>\n")
    with pytest.raises(ValueError):
        tok.apply_chat_template([{"role": "user", "content": "Hi"}], tools="not a list")


def test_multiprocess_engine_knows_the_eos_ids(demo_engine):
    with LLMEngine(model=DEMO, use_multiprocess=True, **small_engine_kwargs()) as engine:
        assert engine.tokenizer.eos_token_ids == demo_engine.tokenizer.eos_token_ids
        assert 151645 in engine.tokenizer.eos_token_ids
