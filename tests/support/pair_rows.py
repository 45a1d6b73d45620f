"""Shared rows and tables of the data-layer tests (test_adapters, test_readers, test_schema,
test_splits): source rows in their real formats, a generic column-mapped file, a valid pair table."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from anchorviz.data.schema import PAIR_COLUMNS


def write_parquet(path: Path, rows: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


HH_PROMPT = (
    "\n\nHuman: What is a good way to relax after work?"
    "\n\nAssistant: A warm bath helps many people."
    "\n\nHuman: Anything else?"
    "\n\nAssistant:"
)


HH_ROWS = [
    # 0: multi-turn; both replies start with "Reading" (the split must not cut inside a reply)
    {"chosen": HH_PROMPT + " Reading a book or taking a short walk can help.",
     "rejected": HH_PROMPT + " Reading is boring, just go to bed."},
    # 1: single turn
    {"chosen": "\n\nHuman: How do I boil an egg?\n\nAssistant: Put it in boiling water for 8 minutes.",
     "rejected": "\n\nHuman: How do I boil an egg?\n\nAssistant: I don't know."},
    # 2: exact duplicate of row 0
    {"chosen": HH_PROMPT + " Reading a book or taking a short walk can help.",
     "rejected": HH_PROMPT + " Reading is boring, just go to bed."},
    # 3: chosen == rejected
    {"chosen": "\n\nHuman: Hi\n\nAssistant: Hello.", "rejected": "\n\nHuman: Hi\n\nAssistant: Hello."},
    # 4: no "\n\nAssistant:" at all
    {"chosen": "Human: hi there, Assistant: hello", "rejected": "Human: hi there, Assistant: go away"},
    # 5: chosen not a string
    {"chosen": 5, "rejected": "\n\nHuman: Hi\n\nAssistant: Hello."},
    # 6: rejected missing
    {"chosen": "\n\nHuman: Hi\n\nAssistant: Hello."},
    # 7: empty final reply
    {"chosen": "\n\nHuman: Hi\n\nAssistant: Hello there.", "rejected": "\n\nHuman: Hi\n\nAssistant:"},
]


HS3_ROWS = [
    {"domain": "general", "language": "english",
     "context": [{"role": "user", "content": "What is 2+2?"}],
     "response1": "2+2 is 4.", "response2": "It is 5.", "overall_preference": -2},
    {"domain": "general", "language": "english",
     "context": [{"role": "user", "content": "Hi"},
                 {"role": "assistant", "content": "Hello! How can I help?"},
                 {"role": "user", "content": "Tell me a joke"}],
     "response1": "No.", "response2": "Why did the chicken cross the road? To get to the other side.",
     "overall_preference": 3},
    {"domain": "code", "language": "python", "context": [{"role": "user", "content": "sort a list"}],
     "response1": "sorted(xs)", "response2": "xs.sort()", "overall_preference": 0},
    {"domain": "stem", "language": "english", "context": [{"role": "user", "content": "q"}],
     "response1": "a", "response2": "b", "overall_preference": 5},
    {"domain": "stem", "language": "english", "context": [{"role": "user", "content": "q2"}],
     "response1": "  ", "response2": "b", "overall_preference": -1},
    {"domain": "stem", "language": "english", "context": "just a string",
     "response1": "a", "response2": "b", "overall_preference": 1},
]


GENERIC = [
    {"question": "Capital of France?", "good": "Paris.", "bad": "Rome.", "id": "a"},
    {"question": "2+2?", "good": "4", "bad": "5", "id": "b"},
    {"question": "2+2?", "good": "4", "bad": "5", "id": "c"},  # duplicate triple
    {"question": "Same?", "good": "x", "bad": "x", "id": "d"},
]


CMAP = {"prompt": "question", "chosen": "good", "rejected": "bad"}


def good_table(n: int = 3) -> pd.DataFrame:
    return pd.DataFrame([
        {"pair_id": f"t:{i}", "dataset": "t", "domain": "t", "prompt": f"p{i}", "chosen": "yes",
         "rejected": "no", "prompt_turns": None, "meta": {}} for i in range(n)
    ], columns=PAIR_COLUMNS)
