"""The run kernel every study uses: the Study contract and its one runner (``study``),
the session (``lifecycle``), the publisher, and the stages the studies share: Phase 4's
classifiers (``classifiers``, ``probes``), vectors, plans, generation, scoring, the
coherence gate, the effect against the null, held-out strength selection, the layer
sweep and the dry run's estimate."""
