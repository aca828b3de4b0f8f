"""Question features and rule cues (appliance.router.features): decisions on examples, and linear time on hostile
input."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from appliance.router import FEATURES, question_features
from appliance.text import normalise_question

# Hostile inputs of about 20,000 characters, one per regex shape that backtracked super-linearly before (a verb
# followed by the rest of its line, `^\s*` under re.M) or could: long runs after a keyword, nested calls.
ADVERSARIAL = {
    "blank lines": "\n" * 20_000, "def then blank lines": "def" + "\n" * 20_000,
    "code verbs": "write " * 3_400, "maths verbs": "solve " * 3_400, "verbs per line": "fix\n" * 5_000,
    "verbs and a noun at the end": "implement it " * 1_700 + "\n" + "code",
    "indented imports": "\n   import" * 2_000, "from without import": "from " + "a" * 20_000,
    "open calls": "a(" * 10_000, "call then spaces": "f()" + " " * 20_000, "semicolons": "; " * 10_000,
    "digits": "1 " * 10_000, "digit then spaces": "1" + " " * 20_000, "operators": "1 +" * 7_000,
    "comparisons": "which is older, a or b " * 900, "spaces": " " * 20_000,
}


@pytest.mark.parametrize("text, code, maths", [
    ("Write a Python function that reverses a linked list.", True, False),
    ("def add(a: int, b: int) -> int:\n    >>> add(1, 2)", True, False),
    ("   import numpy as np", True, False),
    ("from collections import deque", True, False),
    ("int main() { return 0; }", True, False),
    ("please fix my C++", True, False),
    ("Fix the\nfunction", False, False),  # verb and noun on different lines: not a request for code
    ("which code should I fix", False, False),  # the noun must follow the verb
    ("who wrote the novel moby dick", False, False),
    ("Solve 3x + 5 = 20 for x.", False, True),
    ("What is 15% of 240?", False, True),
    ("calculate the area of a circle of radius 2", False, True),
    ("in 1990, what did they compute", False, False),  # the number must follow the verb
    ("how many moons does jupiter have", False, False),
])
def test_rule_cues(text, code, maths):
    features = question_features(text)
    assert (features.code_cue, features.maths_cue) == (code, maths)


def test_hand_features():
    features = question_features("Which park is larger, Doñana or Timanfaya?")
    assert features.words == 7 and features.vector.shape == (len(FEATURES),)
    np.testing.assert_allclose(features.vector, [np.log1p(7), 1.0, 0.0, 0.0])  # "larger ... or": a comparison
    steps = question_features("Who directed the film that won the award after the war?").vector
    assert steps[2] == pytest.approx(np.log1p(2))  # "that", "after"; not the leading "who"
    assert question_features("What is 15% of 240?").vector[3] == pytest.approx(np.log1p(3))  # 15, 240 and '%'


def test_normalise_question_removes_case_punctuation_and_width():
    assert normalise_question("What is the capital of France?") == "what is the capital of france"
    assert normalise_question("  Ｗｈｏ  wrote\n“Hamlet”?? ") == "who wrote hamlet"  # full-width, quotes, spaces
    assert normalise_question("the right but not the\u200b obligation") == "the right but not the obligation"
    assert normalise_question("Is 3.5 > 1,000? Mr. Smith's view.") == "is 3.5 > 1,000 mr smith s view"


def test_hostile_input_finishes():
    """All of them together take ~0.1 s; with the old quadratic patterns four took ~8 s each. The bound is on the
    features alone, timed in the subprocess after its imports (which took over 5 s on a box under load), and
    generous, so that only a complexity regression fails it, not a slow or busy machine."""
    code = ("import json, sys, time\nfrom appliance.router import question_features\n"
            "started = time.perf_counter()\n"
            "for name, text in json.load(sys.stdin).items():\n"
            "    question_features(text)\n    print(name, flush=True)\n"
            "print(time.perf_counter() - started)\n")
    try:
        done = subprocess.run([sys.executable, "-c", code], input=json.dumps(ADVERSARIAL), capture_output=True,
                              text=True, timeout=120)
    except subprocess.TimeoutExpired as exc:
        finished = (exc.stdout or b"").decode().splitlines()
        stuck = next(name for name in ADVERSARIAL if name not in finished)
        pytest.fail(f"question_features did not finish on {stuck!r}")
    assert done.returncode == 0, done.stderr
    *names, seconds = done.stdout.splitlines()
    assert names == list(ADVERSARIAL)
    assert float(seconds) < 4.0, f"question_features took {seconds} s on the hostile inputs"
