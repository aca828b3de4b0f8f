"""What the conversations benchmark runs, named once for the run (conversations.py) and its report."""

CHEAP_MODES = ["raw", "history", "expand", "auto"]  # no engine: every conversation
RETRIEVAL_MODES = CHEAP_MODES + ["rewrite"]  # on the LLM subset; then auto with followup = rewrite
REWRITE_MODES = ["raw", "expand", "history", "auto"]  # every row; rewrite (and these again) on the LLM subset
PENALTY = 0.5  # frequency_penalty step 3 compares with 0 (against loops)
AUTO_REWRITE = "auto (followup=rewrite)"
EXAMPLES = 4  # resolved follow-ups kept per mode for the report
ANSWER_BUDGET_MIN = 8.0
