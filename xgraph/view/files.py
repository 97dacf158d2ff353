"""Writing a view to disk: through xgraph's one file writer (`xgraph.ir.files`), all or nothing."""
from __future__ import annotations

from xgraph.ir.files import write_text

__all__ = ["write_text"]
