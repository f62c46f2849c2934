"""The engine's primitives that models and drivers share, below every layer: the stop flag the
kernels poll (``stop_flag``), time grids (``saveat``), the Runge–Kutta / Dormand–Prince steppers
and their coefficients (``steppers``), the checked GD step of the fused training loops (``gd``), the per-task status codes of the integrators
(``task_status``), the state of the generic SoA integrators (``soa_state``) and putting a
checkpointed per-task state back (``restore``). Nothing here names or imports a model."""
