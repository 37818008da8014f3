"""The documentation site's build: MkDocs hooks (``hooks:`` in mkdocs.yml), not pages.

``site`` is the hook module MkDocs loads; ``generated`` renders what the pages take from the
code (the environment variables, the API's error codes, the acceptance references), so that
the documentation cannot drift from it; ``theme/`` overrides one template (the API reference).
"""
