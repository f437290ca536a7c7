"""The A/B protocol (spec §7; §5 phase 8): the constructor against "stuff everything".

``runner.run_ab`` takes SWE-bench-format instances (``instances``), materializes each
repository at its base commit with the instance's test patch applied, never the gold
patch (``materialize``), stores the instance's gold facts (``gold``), and constructs
the decisions a harness would make — localize, then edit (``decisions``) — for every
arm and variant (``variants``), its ranking step pointed at no endpoint, a real one,
or the oracle (``oracle_ranker``: the gold facts behind the real HTTP path). The
harness's results come back as ``outcomes``; every figure is then SQL over the store
(``reports``).

Nothing is imported here: the pipeline imports ``ab.variants`` and the store
imports ``ab.outcomes``, and neither may pull in the runner (which imports the store).
"""
