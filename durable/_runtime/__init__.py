"""The engine behind `durable.workflow` and `durable.Worker` (private).

Read top-down; each module imports only the ones below it (no circles:
tests/unit/test_layout.py checks, ``TYPE_CHECKING`` imports included):

- `queries`, `remote`: the worker's parts beside the engine: answering queries
  of runs no live worker holds; remote activity attempts (claimed, run,
  recorded, supervised: the twin of `local`), both typed against `serving`
- `upgrade`: the upgrade gate (a run another build advanced is replayed
  read-only before this worker takes it) and `durable check-upgrade`'s check
- `claiming`, `outage`: one claim loop for runs and attempts; one way
  through storage outages
- `replay`: read-only replays (those queries, `durable.testing.Replayer`)
- `executor`: executing a claimed run (replay, delivery, close); the run's host
- `inbox`: signals, updates and queries inside a run, and where they are delivered
- `readonly`: the runtime of a query handler or an update validator
- `runtime`: the interface `durable.workflow` calls, and the run's implementation
- `interact`, `phases`, `units`, `local`: handles, phases, idempotent units, local activities
- `ops`: the durable operations (remote activities, timers, children) and what they share
- `caps`: the time a phase leaves the ops inside it
- `state`: which workflow task is calling (op identity = task path + sequence)
- `context`: one run's recorded ops, waiters and commits; what it asks of its host
  (`RunHost`), its worker (`WorkerServices`) and its committer (`Submitter`)
- `parking`: where the run's tasks are: parked ops, quiet, the delivery gate
- `attempts`: the one runner of activity attempts, local and remote
- `handlers`, `committer`, `history`: handler tables, group commit, histories
"""
