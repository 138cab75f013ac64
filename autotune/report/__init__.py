"""What a sweep tells its user.

``opening`` (the study, read-only), ``load`` and ``model`` (the study read once into a ``Report``;
the winner from ``core.verdict``), ``markdown``, ``htmlpage`` with ``svgchart``, ``jsondoc``
(the three formats, from ``cells`` and ``text``), ``winning`` (the winning config and its launch
command), ``files`` (writing them), ``build`` (the entry points), ``status`` (the live view).
"""
