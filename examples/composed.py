"""composed: two sentinel fleets, submission workers and agents on one system, killed on two schedules."""
from scenarios.api import (ACK_LOST, CRASH_BEFORE_CALL, HOUR, MINUTE, SECOND, AgentSubmitters, AgentWorkers,
                           CasLinear, ExactlyOnceSettlement, Fencing, Liveness, NodeKills, PortFaults, Reconciler,
                           ReferenceModel, Schedule, Sentinels, Stack, Submitters, System, Workers, scenario)


@scenario("composed", "sentinels at two cadences, submission workers and agents, under two kill schedules",
          duration="1d", sweep="2h")
def composed(run):
    end_ms = run.opts.duration_ms
    fast = Sentinels([Schedule("fast", 1 * MINUTE, end_ms=end_ms)], name="fast")
    slow = Sentinels([Schedule("slow", 7 * MINUTE, end_ms=end_ms)], name="slow")
    requests, asks = Submitters(name="requests", defer_share=1 / 8), AgentSubmitters(name="asks")
    workers, agents = Workers(2, serving=requests), AgentWorkers(2, serving=asks)
    return Stack(
        system=System(restart_ms=(1 * SECOND, 20 * SECOND)),
        workloads=[fast, slow, requests, workers, asks, agents, Reconciler(tools=agents.tools, serving=asks),
                   NodeKills([fast, slow], every_ms=(1 * HOUR, 8 * HOUR), restart_ms=(1 * SECOND, 15 * MINUTE)),
                   NodeKills([workers, agents], every_ms=(10 * MINUTE, 2 * HOUR), restart_ms=(1 * SECOND, MINUTE))],
        faults=PortFaults(run.rates({CRASH_BEFORE_CALL: 1e-4, ACK_LOST: 1e-4})),
        checks=[CasLinear(), ExactlyOnceSettlement(), Fencing(), ReferenceModel(), Liveness()],
        heal_ms_max=2 * HOUR, settle_ms=1 * HOUR)
