"""What an identify run measures, stage by stage: the activations, splits and manipulated
directions (``data``, ``directions``, ``manipulations``), each direction scored as a
detector (``detect``), and how each steers (``generation``, ``outcome``, ``matched``,
``subset``, ``namefree`` with ``english``). ``identify/pipeline.py`` composes them; they
import nothing else of ``identify``.
"""
