"""The lowered resharding program (plan/resharding.py): boxes, tasks and
programs round-trip through their text, and invalid ones are refused."""

import pytest

from optimizer_service.errors import InvalidInputError, PlanError
from optimizer_service.plan.resharding import Box, ReshardProgram, ReshardTask, Strategy

PROGRAM = """\
reshard 4x4 element_bytes=4 algorithm=ensemble predicted=0.25
src 0 [0:2,0:4]
src 1 [2:4,0:4]
dst 4 [0:4,0:2]
dst 5 [0:4,2:4]
dst 6 [0:4,0:2]
task 0 [0:2,0:2] broadcast K=2 from 0 to 4|6
task 1 [2:4,2:4] send-recv K=1 from 1 to 5
task 2 [0:2,2:4] local-allgather K=1 from 0 to 5
task 3 [2:4,0:2] global-allgather K=1 from 1 to 4|6"""


def test_boxes():
    box = Box.parse("0:512,256:1024,0:8")
    assert str(box) == "0:512,256:1024,0:8" and Box.parse(str(box)) == box
    assert box.shape == (512, 768, 8) and box.elements == 512 * 768 * 8 and not box.empty
    assert Box.whole((4, 4)) == Box((0, 0), (4, 4))
    assert Box.whole((4, 4)).contains(Box.parse("1:2,0:4")) and not Box.parse("1:2,0:4").contains(Box.whole((4, 4)))
    assert Box.parse("0:2,0:4").intersect(Box.parse("1:3,2:6")) == Box.parse("1:2,2:4")
    assert Box.parse("0:2,0:4").intersect(Box.parse("2:3,0:4")).empty
    assert Box.parse("2:3,1:4").relative_to(Box.parse("2:4,0:4")) == (slice(0, 1), slice(1, 4))
    assert Box.parse("4:4,0:2").empty


@pytest.mark.parametrize("text, message", [("0:2,x", "is not 'START:STOP"), ("3:2", "not 0 <= start <= stop")])
def test_bad_boxes(text, message):
    with pytest.raises(InvalidInputError, match=message):
        Box.parse(text)
    with pytest.raises(PlanError, match="is not inside"):
        Box.parse("0:5").relative_to(Box.parse("1:4"))


def test_tasks_round_trip():
    task = ReshardTask(3, Box.parse("0:2,0:4"), Strategy.BROADCAST, 0, ((4, 5), (8,)), 16)
    assert str(task) == "task 3 [0:2,0:4] broadcast K=16 from 0 to 4,5|8"
    assert ReshardTask.parse(str(task)) == task
    assert task.receivers == (4, 5, 8) and task.ranks == (0, 4, 5, 8)
    assert Strategy.parse("Local_Allgather") is Strategy.LOCAL_ALLGATHER


def test_a_task_names_the_tasks_it_follows_on_its_hosts_and_text_without_them_still_parses():
    task = ReshardTask(3, Box.parse("0:2"), Strategy.SEND_RECV, 0, ((4,), (5,)), 1, (0, 2))
    assert str(task) == "task 3 [0:2] send-recv K=1 from 0 to 4|5 after 0,2"
    assert ReshardTask.parse(str(task)) == task
    assert ReshardTask.parse("task 3 [0:2] send-recv K=1 from 0 to 4|5").after == ()
    program = ReshardProgram.parse(PROGRAM.replace("from 1 to 4|6", "from 1 to 4|6 after 0,1"))
    assert program.tasks[3].after == (0, 1) and program.tasks[2].after == ()
    assert ReshardProgram.parse(str(program)) == program


@pytest.mark.parametrize("after, message", [((3,), "must name earlier tasks"), ((2, 0), "ascending"),
                                            ((0, 0), "each once"), ((-1,), "must name earlier tasks")])
def test_a_task_follows_only_earlier_tasks(after, message):
    with pytest.raises(PlanError, match=message):
        ReshardTask(3, Box.parse("0:2"), Strategy.SEND_RECV, 0, ((4,),), 1, after)


@pytest.mark.parametrize("build, message", [
    (lambda: ReshardTask(0, Box.parse("0:1"), Strategy.BROADCAST, 0, ((1,),), 0), "partitions must be >= 1"),
    (lambda: ReshardTask(0, Box.parse("0:1"), Strategy.BROADCAST, 0, ((1,), ()), 1), "needs at least one rank"),
    (lambda: ReshardTask(0, Box.parse("0:1"), Strategy.BROADCAST, 1, ((1, 2),), 1), "both sends and receives"),
    (lambda: ReshardTask(0, Box.parse("0:1"), Strategy.BROADCAST, 0, ((1,), (1,)), 1), "listed twice"),
    (lambda: ReshardTask.parse("task 0 0:1 broadcast from 0 to 1"), "is not 'task ORDER"),
    (lambda: Strategy.parse("multicast"), "unknown resharding strategy 'multicast'"),
])
def test_bad_tasks(build, message):
    with pytest.raises(InvalidInputError, match=message):
        build()


def test_programs_round_trip_through_text_and_json():
    program = ReshardProgram.parse(PROGRAM)
    assert str(program) == PROGRAM
    assert ReshardProgram.parse(str(program)) == program
    assert ReshardProgram.from_dict(program.to_dict()) == program
    assert program.shape == (4, 4) and program.algorithm == "ensemble" and program.predicted_seconds == 0.25
    assert program.ranks == (0, 1, 4, 5, 6)
    assert [t.order for t in program.tasks_of(5)] == [1, 2]
    assert [t.order for t in program.tasks_of(0)] == [0, 2]
    anonymous = ReshardProgram((2,), {0: Box.parse("0:2")}, {1: Box.parse("0:2")},
                               (ReshardTask(0, Box.parse("0:2"), Strategy.SEND_RECV, 0, ((1,),)),),
                               predicted_seconds=1e-3 / 3)
    assert "algorithm=-" in str(anonymous) and ReshardProgram.parse(str(anonymous)) == anonymous


def replace_line(old: str, new: str) -> str:
    assert old in PROGRAM
    return PROGRAM.replace(old, new)


@pytest.mark.parametrize("text, message", [
    (replace_line("dst 6 [0:4,0:2]", "dst 1 [0:4,0:2]"), r"ranks \[1\] are in both meshes"),
    (replace_line("src 1 [2:4,0:4]", "src 1 [2:5,0:4]"), "source rank 1's box \\[2:5,0:4\\] is not inside"),
    (replace_line("task 1 [2:4,2:4]", "task 5 [2:4,2:4]"), "strictly increasing order"),
    (replace_line("from 1 to 5", "from 0 to 5"), "task 1: rank 0 does not hold"),
    (replace_line("from 0 to 4|6", "from 0 to 4|5"), "task 0: rank 5 does not need"),
    (replace_line("from 0 to 4|6", "from 0 to 4|9"), "task 0: rank 9 does not need"),
    ("", "empty resharding program"),
    ("reshard 4x4 element_bytes=4", "header .* is not"),
    (replace_line("task 1 [2:4,2:4] send-recv K=1 from 1 to 5", "task 1 [2:4,2:4] send-recv from 1 to 5"),
     "is not 'task ORDER"),
    (replace_line("task 1 [2:4,2:4] send-recv K=1 from 1 to 5\n", "")
     .replace("from 1 to 4|6", "from 1 to 4|6 after 1"), "after names task 1, which the program lacks"),
])
def test_invalid_programs_are_refused(text, message):
    with pytest.raises(InvalidInputError, match=message) as error:
        ReshardProgram.parse(text)
    assert "\n" not in str(error.value)


def test_json_form_is_checked():
    with pytest.raises(InvalidInputError, match="JSON form"):
        ReshardProgram.from_dict({"program": PROGRAM})
