"""The in-context linear regression models ``attn-m``, ``attn-s`` and ``mlp-cubic`` (docs/theory.md,
ICL): the model classes and kernels (:mod:`.attn_m`, :mod:`.attn_s`, :mod:`.mlp_cubic`), their
config (:mod:`.config`, with the moment-path thresholds), data sets (:mod:`.problem`), the run's
setup for the trained-model driver (:mod:`.settings`, :mod:`.setup`, :mod:`.diagnostics`,
:mod:`.train_minimum`), the fixed points and theory commands (:mod:`.fixed_points`,
:mod:`.commands`) and the entries their ``fastdyn.models`` entry points name (:mod:`.registry`).
Nothing is imported here: each entry point loads only what it names."""
