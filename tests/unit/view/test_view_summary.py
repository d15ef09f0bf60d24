"""view/summary.py: what was resident at one time in a tree of processes, and the line for
Python frames the splice could not place."""

from __future__ import annotations

from heapscope.view.summary import Resident, busiest_moment, rss_line, unplaced_line

MIB = 1 << 20


def test_processes_that_never_ran_together_are_not_added() -> None:
    # GIVEN a shell (3 MiB, the whole time) that runs two compilers one after the other
    procs = [(0, 100, 1 * MIB, 3 * MIB, 0), (10, 40, 200 * MIB, 300 * MIB, 1 * MIB),
             (40, 90, 400 * MIB, 500 * MIB, 2 * MIB)]  # the second starts as the first ends
    # WHEN the busiest moment is taken
    got = busiest_moment(procs)
    # THEN it is the shell and the second compiler: 503 MiB, not 803 MiB
    assert got == Resident(401 * MIB, 503 * MIB, 2 * MIB, 2)


def test_processes_alive_together_are_summed_and_a_running_one_has_no_end() -> None:
    procs = [(0, None, 0, 10 * MIB, 0), (5, 50, 0, 20 * MIB, 0), (6, 7, 0, 1 * MIB, 0), (60, 70, 0, 25 * MIB, 0)]
    assert busiest_moment(procs) == Resident(0, 35 * MIB, 0, 2)  # the first with the last, not 10 + 20 + 1
    assert busiest_moment([]) == Resident(0, 0, 0, 0)


def test_the_rss_line_says_when_it_is_a_sum_and_of_what() -> None:
    one = rss_line(5 * MIB, 8 * MIB, MIB, 1)
    assert one == "seen 5.0 MiB of RSS 8.0 MiB (heapscope's own 1.0 MiB of it; peak of the sampled heaps vs." \
                  " peak resident set)"
    several = rss_line(5 * MIB, 8 * MIB, 0, 3)
    assert "in the processes that ran at one time" in several and "each one's peak, summed" in several
    assert " in big (pid 7) (" in rss_line(5 * MIB, 8 * MIB, 0, 3, " in big (pid 7)")
    assert rss_line(1, 0, 0, 1) == ""


def test_unplaced_frames_say_what_they_cost_and_what_to_do() -> None:
    cut = unplaced_line(69952, 1200, 128, 256)
    assert cut.startswith("python frames: 69,952 Python frames put at the top of their stacks")
    assert "report's Python view (the default) is right" in cut
    assert "record with --max-frames 256 to keep them whole" in cut
    assert "--max-frames" not in unplaced_line(3, 0, 128, 256)
    assert "--max-frames" not in unplaced_line(3, 10, 256, 256)  # already the most
