# The switch of a module's two-thread split of large launches (_pool.pxi), for tests: a split
# launch computes exactly what one pass computes, so results are the same either way.

_split_enabled = True


def set_split(bint enabled):
    """Turns the two-thread split of large launches on or off (results are the same; for tests);
    returns the old setting."""
    global _split_enabled
    old = _split_enabled
    _split_enabled = enabled
    return old


def split_jobs():
    """How many launches of this module were split over the helper thread so far (for tests)."""
    return ek_pool_job_count()
