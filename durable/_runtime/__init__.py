"""The engine behind `durable.workflow` and `durable.Worker` (private).

- `state`: which workflow task is calling (op identity = task path + sequence)
- `context`: one run's recorded ops, waiters and cancellation bookkeeping
- `committer`: group commit of many runs' writes
- `ops`, `local`: the durable operations (remote/local activities, timers, children)
- `attempts`: the one runner of activity attempts, local and remote
- `runtime`: the interface `durable.workflow` calls
- `executor`: executing a claimed run (replay, delivery, close)
"""
