"""two-cadences: a sentinel every minute and one every 7 minutes, one worker
killed now and then, lost acks and crashes at the ports."""
from scenarios.api import (ACK_LOST, CRASH_BEFORE_CALL, HOUR, MINUTE, SECOND, CasLinear, ExactlyOnceSettlement,
                           NodeKills, PortFaults, Schedule, Sentinels, Stack, System, scenario)


@scenario("two-cadences", "a 1-minute and a 7-minute sentinel under kills and lost acks", duration="1d")
def two_cadences(run):
    end_ms = run.opts.duration_ms
    fleet = Sentinels([Schedule("fast", 1 * MINUTE, end_ms=end_ms), Schedule("slow", 7 * MINUTE, end_ms=end_ms)])
    return Stack(
        system=System(restart_ms=(1 * SECOND, 20 * SECOND)),
        workloads=[fleet,  # brings exactly-once-wake for its schedules
                   NodeKills([fleet], every_ms=(1 * HOUR, 8 * HOUR), restart_ms=(1 * SECOND, 15 * MINUTE))],
        faults=PortFaults(run.rates({CRASH_BEFORE_CALL: 1e-4, ACK_LOST: 1e-4})),
        checks=[CasLinear(), ExactlyOnceSettlement()],
        heal_ms_max=6 * HOUR, settle_ms=1 * HOUR)
