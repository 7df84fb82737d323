"""``litehit gen-dataset`` (LMCache's ``cache-simulator gen-dataset``, byte for byte).

- :mod:`.dataset`: the command's work: inputs, options, the dataset written all or nothing;
- :mod:`.events`: the requests, indexed once and read back in LMCache's order;
- :mod:`.tokens`: the prompts: LMCache's random draws and decode, exactly and fast;
- :mod:`.tokenizer`: the tokenizer, loaded as transformers loads it, and its safe vocabulary.
"""
