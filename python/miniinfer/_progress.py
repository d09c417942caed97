"""generate()'s progress bar: tqdm when it is installed, else one line on stderr (a terminal
only, so logs are not filled with carriage returns)."""
from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, enabled: bool) -> None:
        self._total, self._done, self._tokens = total, 0, 0
        self._start = time.perf_counter()
        self._bar = None
        self._line = False
        if not enabled or total == 0:
            return
        try:
            from tqdm.auto import tqdm
            self._bar = tqdm(total=total, desc="Processed prompts", unit="req", dynamic_ncols=True)
        except ImportError:
            self._line = sys.stderr.isatty()

    def update(self, num_done: int, num_tokens: int) -> None:
        self._done += num_done
        self._tokens += num_tokens
        rate = self._tokens / max(time.perf_counter() - self._start, 1e-9)
        if self._bar is not None:
            self._bar.set_postfix_str(f"output {rate:.1f} tok/s", refresh=False)
            self._bar.update(num_done)
        elif self._line:
            sys.stderr.write(f"\r{self._done}/{self._total} requests done, {self._tokens} tokens, "
                             f"{rate:.1f} tok/s")
            sys.stderr.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self._line:
            sys.stderr.write("\n")
