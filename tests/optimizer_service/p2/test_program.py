import pytest

from optimizer_service.errors import InvalidInputError
from optimizer_service.p2.program import INSIDE_GROUP, Form, FormKind, Program, Reduction
from optimizer_service.plan.collective import Collective


def test_reduction_text_form():
    reduction = Reduction("server", Form(FormKind.PARALLEL, "rack"), Collective.ALL_REDUCE)
    assert str(reduction) == "server Parallel(rack) AllReduce"
    assert Reduction.parse("server Parallel(rack) AllReduce") == reduction
    assert Reduction.parse("  CPU   Master( rack )  broadcast ") == Reduction(
        "CPU", Form(FormKind.MASTER, "rack"), Collective.BROADCAST)


def test_program_text_form_and_size():
    text = "node InsideGroup ReduceScatter; node Parallel(root) AllReduce; node InsideGroup AllGather"
    program = Program.parse(text)
    assert str(program) == text
    assert program.size == 4  # 1 + 2 + 1
    assert len(program) == 3
    assert Program((Reduction("root", INSIDE_GROUP, Collective.ALL_REDUCE),)).size == 1


@pytest.mark.parametrize("bad,message", [
    ("", "at least one reduction"),
    ("node InsideGroup", "SLICE FORM COLLECTIVE"),
    ("node Sideways AllReduce", "not InsideGroup"),
    ("node InsideGroup AllScatter", "unknown collective"),
    ("node Parallel AllReduce", "needs a level"),
])
def test_bad_programs_say_what_is_wrong(bad, message):
    with pytest.raises(InvalidInputError, match=message):
        Program.parse(bad)
