"""Speech recognition on edgetorch: Whisper exported to a ``.pte`` and a torch-free speech runner.

``whisper`` (CTranslate2 weights into transformers' Whisper, and ``export_whisper``) is the compiler half
and imports torch; ``audio`` (WAV reading, resampling, log-mel features), ``tokens``, ``ctranslate2`` and
``runner`` (``AsrRunner``) import only NumPy, the standard library and edgetorch's runtime. This package
file imports nothing, so either half can be used alone.
"""
