"""`cascade serve-reward`: a trained reward model over HTTP, for trainers on other machines."""

from __future__ import annotations

from pathlib import Path

import typer

from cli.app import app
from cli.console import CascadeError


@app.command("serve-reward")
def serve_reward(
    model: str = typer.Option(
        ..., "--model", help="Reward model directory (a reward_model stage's final/)."
    ),
    port: int = typer.Option(8008, "--port", help="Port to listen on (0: any free port)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (0.0.0.0: all)."),
    batch_size: int = typer.Option(8, "--batch-size", help="Responses per forward pass."),
    device: str = typer.Option(None, "--device", help="cuda, cuda:1, cpu (default: cuda if any)."),
    name: str = typer.Option(None, "--name", help="Model name in answers (default: the stage)."),
) -> None:
    """Serve MODEL's scores at http://HOST:PORT/v1/rewards (JSON; see training/reward_server.py).

    A GRPO stage uses it with `"reward_model": "http://HOST:PORT"`.
    """
    from training.reward_clients import SequenceClassifierRM
    from training.reward_server import RewardServer

    path = Path(model)
    if model.startswith(("/", ".")) and not (path / "config.json").is_file():
        raise CascadeError(f"{model} is not a model directory (no config.json)")
    scorer = SequenceClassifierRM(model, device=device, batch_size=batch_size)
    default = path.parent.name if path.name == "final" else path.name
    server = RewardServer(scorer, name=name or default, host=host, port=port)
    # plain print: scripts read the URL from the first line
    print(f"serving reward model {model} at {server.base_url}/v1/rewards", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
