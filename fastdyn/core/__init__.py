"""The engine's primitives that models and drivers share, below every layer: the stop flag the
kernels poll (``stop_flag``), time grids (``saveat``), the Runge–Kutta / Dormand–Prince steppers
and their coefficients (``steppers``) and the per-task status codes of the integrators
(``task_status``). Nothing here names or imports a model."""
