"""Train one configuration: ``python train.py model=gat norm=lip dataset=cora depth=30`` (Hydra CLI)."""

from lipgnn.cli import train_main

if __name__ == "__main__":
    train_main()
