"""Phase 5 Parts B and C: blind human validation of Δ and the conditional judge panel.

``runs`` finds a finished Phase 5 parent and reads it (through RunDir, else MLflow
artefacts); ``human`` exports, rates and imports the blind ratings; ``panel`` runs the
judge panel; ``criterion4`` stores both verdicts and combines them. Nothing here imports
typer or rich: the commands live in :mod:`experiments.cli.human` and
:mod:`experiments.cli.panel`.
"""
