"""④ Per-task status codes of the ODE integrators (shared by the CPU kernels and their CUDA twins).

running: reached the last output time; settled: frozen by the settling rule; frozen: rate 0 or a
stationary start, never moves; step limit: ``max_steps`` reached (outputs stale); diverged:
non-finite state (outputs NaN); stalled: dopri5 step below the resolution of t.
"""

STATUS_RUNNING = 0
STATUS_SETTLED = 1
STATUS_FROZEN = 2
STATUS_STEP_LIMIT = 3
STATUS_DIVERGED = 4
STATUS_STALLED = 5
STATUS_NAMES = ("running", "settled", "frozen", "step limit", "diverged", "stalled")
