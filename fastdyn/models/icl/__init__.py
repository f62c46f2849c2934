"""The in-context linear regression models (``attn-m``, ``attn-s``, ``mlp-cubic``): their config
(:mod:`.config`) and data sets (:mod:`.problem`)."""
