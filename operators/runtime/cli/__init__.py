"""The CLI kit: what every `stead` noun shares, whichever domain it belongs to.

- `nouns`: `Noun`, a command of `stead` declared by its name, help, aliases and the (lazily loaded) function
  that adds its actions;
- `commands`: what the commands that talk to the Kubernetes API server share (`stead app`, `stead service`,
  `stead graph`, ...): the light client from the kubeconfig, and every refusal as one line and exit code 1;
- `client`: the client half of the API server (`stead config`, `stead graph logs`): where the server is,
  credentials, TLS, one request and its errors;
- `output`: tables and documents as the commands print them.

Standard library only at import: `stead --help` and every command's parser import this package, never the
runtime it sits in.
"""
