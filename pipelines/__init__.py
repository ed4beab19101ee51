"""The workflow engine on Luigi (runbooks and deployment graphs run here).

Generic by design: it knows nothing of blueprints or graphs and never imports `operators`.
The engine itself arrives with the Apps issue; the package exists now so that the import
contracts are checked from the first commit.
"""
