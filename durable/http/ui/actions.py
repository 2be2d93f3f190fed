"""The operator actions a run's page offers: for each, the API operation it
performs, its confirmation page's words and the notice shown after it.

Data, not behaviour: `durable.http.ui.pages` performs them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Action:
    """An operator action: the API operation it performs and its confirmation page."""

    name: str
    operation_id: str
    title: str
    verb: str
    warning: str
    notice: str


ACTIONS: dict[str, Action] = {a.name: a for a in (
    Action("request-cancellation", "requestCancellationRun", "Request cancellation",
           "Request cancellation",
           "The run keeps running while its code cleans up; it closes as cancelled when the "
           "cleanup finishes, or when the cleanup deadline passes. Children and activities "
           "get the request according to their policies.", "cancellation-requested"),
    Action("cancel", "cancelWorkflowRun", "Cancel now", "Cancel the run now",
           "The run closes at once as cancelled: no cleanup code runs, its open activity "
           "attempts are fenced and told to stop.", "cancelled"),
    Action("terminate", "terminateWorkflowRun", "Terminate", "Terminate the run",
           "The run closes at once as terminated, revoking its authority: nothing it still "
           "does can be recorded.", "terminated"),
    Action("retry-after-review", "retryAfterReview", "Retry after review", "Retry the run",
           "A worker claims the run and replays it. After a replay mismatch, first deploy code "
           "that replays its history. For units whose effect could not be confirmed, say what "
           "you found: run them again (the effect did not happen, or twice is harmless) or "
           "record them done (it happened).", "review-cleared"),
    Action("reset", "resetWorkflow", "Reset", "Reset the run",
           "The run continues as a new run of the same workflow id that keeps the results "
           "recorded before the op you choose (nothing before it runs again) and runs the "
           "rest with the code workers run now. An open run is terminated first. Deploy the "
           "fix before you reset.", "reset"),
    Action("signal", "", "Send a signal", "Send the signal",
           "The signal is recorded and delivered to the workflow's handler for its name, "
           "once, in order.", "signalled"),
    Action("query", "queryWorkflowRun", "Ask a query", "Ask",
           "A query asks the workflow's handler for an answer: a worker replays the run to "
           "answer it, and nothing is recorded. Viewers may query.", ""),
    Action("update", "updateWorkflowRun", "Send an update", "Send the update",
           "An update runs the workflow's handler for its name: its validator may reject "
           "it (nothing is recorded), otherwise it is recorded and its result returned "
           "here. Sending the same form again (a reload) does not run it twice.", ""),
)}
# Actions whose answer is shown on their own page rather than after a redirect.
ANSWERED = ("query", "update")
# How long a query waits for a worker's answer (the server caps it by its max_wait).
QUERY_WAIT = 10.0
