terraform {
  # 1.11: write-only attributes (the DB password and the DSN secret never reach state).
  required_version = ">= 1.11"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # password_wo / secret_string_wo arrived in 5.88.
      version = "~> 5.0, >= 5.88"
    }
  }
}
