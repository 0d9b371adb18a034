terraform {
  required_version = ">= 1.11"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 5.0, >= 5.88"
    }
  }

  # Configure a remote backend (e.g. S3 with use_lockfile = true) for real use.
}

provider "aws" {
  region = var.region

  default_tags {
    tags = { "managed-by" = "terraform" }
  }
}
