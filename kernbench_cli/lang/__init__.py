"""The `tl` kernel language: API (`tl.TL`), tensors, dtypes, and the one greenlet bridge."""
