"""External data sets: the catalogue of known files (:mod:`.catalog`), finding or downloading them
(:mod:`.locate`) and the bounded transfer (:mod:`.download`). Problems read their data through :func:`.locate.locate`.
"""
