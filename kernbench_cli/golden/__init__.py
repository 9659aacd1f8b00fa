"""Golden results: cases, the record kept per case, regen, check and the diff."""
