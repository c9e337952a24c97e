"""The claim engine: claims declared as data (``claims/*.yaml``, or a researcher's own file) and
decided by a small vocabulary of test types.

- :mod:`.declare`: reading and checking the declarations (:class:`~.declare.Claim`).
- :mod:`.part`: one part of a claim as read (:class:`~.part.Part`) and its margin.
- :mod:`.evidence`: the jobs an arm selects, a job's value of a metric expression.
- :mod:`.tests`: the test types (superiority, non_inferiority, equivalence, contrast, trend, threshold, quantity).
- :mod:`.measures`: what a ``quantity`` part measures (parameter shares, ``bench.json`` numbers).
- :mod:`.stability`: the second-half check of a decided comparison.
- :mod:`.results`: the part and claim results.
- :mod:`.engine`: which claims a sweep asks about, and a claim's verdict from its parts.
"""
