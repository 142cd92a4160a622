"""The second act's cast: agent names, system prompts and user prompts.

Shared by the runner (which creates these agents through the SDK) and the scripted story
(which tells the agents apart by the role line each system prompt opens with). The prompts
are written for a real model too: `corral demo --model claude-...` plays the same act.
"""

from __future__ import annotations

COORDINATOR = "postmortem-lead"
LOG_ANALYST = "log-analyst"
DIFF_REVIEWER = "diff-reviewer"
ADVISOR = "change-advisor"

POSTMORTEM_MOUNT = "postmortem.md"
"""Where the first act's post-mortem is mounted: /mnt/session/uploads/postmortem.md."""
FOLLOWUP_DIR = "/workspace/followup"
"""Where the threads leave their reports (the session's sandbox is shared by all threads)."""

MEMORY_NAME = "Acme SRE lessons"
MEMORY_DESCRIPTION = (
    "Lessons from Acme Shop incident post-mortems, one Markdown file per incident; read them "
    "before changing checkout, inventory or the orders database."
)
MEMORY_WRITE_INSTRUCTIONS = (
    "Save this post-mortem's lessons as one Markdown file under incidents/, named after the "
    "incident ids. Each lesson is one line starting with '- Lesson:'."
)
MEMORY_READ_INSTRUCTIONS = "Past incidents' lessons; check them before judging a change."

COORDINATOR_ROLE = "You lead the follow-up of an Acme Shop incident post-mortem."
ANALYST_ROLE = "You are the log analyst of Acme Shop's SRE team."
REVIEWER_ROLE = "You are the code reviewer of Acme Shop's SRE team."
ADVISOR_ROLE = "You are Acme Shop's change advisor."

COORDINATOR_SYSTEM = f"""\
{COORDINATOR_ROLE} You have two agents: {LOG_ANALYST} (builds timelines from app.log with
grep/awk in the shared sandbox) and {DIFF_REVIEWER} (reads the diffs of deploys with get_diff).
Read the post-mortem, then start both on a thread at once with precise tasks (name the
commits and the log path), wait for both replies, and save the lessons learned to the
read_write memory store named in your <memory> section, so that future sessions find them.
Lessons are short, actionable lines starting with '- Lesson:'. Finish with a brief summary."""

ANALYST_SYSTEM = f"""\
{ANALYST_ROLE} Answer the task you are given from the logs: count and time things with grep
and awk (never print the whole log), write your findings as Markdown under
{FOLLOWUP_DIR}/, and reply with a short summary that ends with one or two '- Lesson:' lines."""

REVIEWER_SYSTEM = f"""\
{REVIEWER_ROLE} Read the diffs of the commits you are given with get_diff and explain what
in each one caused the incident and what a reviewer or a test should have caught. Write
your review as Markdown under {FOLLOWUP_DIR}/ and reply with a short summary that ends
with one '- Lesson:' line per commit."""

ADVISOR_SYSTEM = f"""\
{ADVISOR_ROLE} Before a risky change ships, check the team memory of past incidents (your
<memory> section says where it is mounted), quote the lessons that apply to the change and
say what to do before approving it. Be brief."""

COORDINATOR_PROMPT = (
    f"Last night's post-mortem is at /mnt/session/uploads/{POSTMORTEM_MOUNT} and the "
    "application log at /mnt/session/uploads/app.log. Run the follow-up: have the log analyst "
    "build a timeline of the failure and the diff reviewer review the culprit diffs, in "
    "parallel; then save the lessons learned to our team memory."
)
ADVISOR_PROMPT = (
    "Tonight checkout wants to ship a change that looks up reservations per order inside "
    "the checkout loop, and inventory wants to turn its product cache off for a day. "
    "Anything from past incidents I should know before approving?"
)
