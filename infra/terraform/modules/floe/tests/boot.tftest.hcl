# The secure deployment, rendered for tests/infra/test_task_boot.py: TLS + SASL +
# ACLs on, one apply against the mocked provider. That test reads this run's
# state (terraform test -json -verbose), takes the agent's task definition from it
# (environment, secret names, user, volumes, the init container) and boots a real
# agent exactly so: read-only root filesystem, only the task's volumes writable.
# The asserts here check the same task definition without booting anything.

mock_provider "aws" {
  mock_data "aws_region" {
    defaults = {
      name = "us-east-1"
    }
  }
  mock_data "aws_partition" {
    defaults = {
      partition = "aws"
    }
  }
  mock_data "aws_iam_policy_document" {
    defaults = {
      json = "{\"Version\":\"2012-10-17\",\"Statement\":[]}"
    }
  }
  mock_resource "aws_lb" {
    defaults = {
      dns_name = "floe-nlb-0123456789.elb.us-east-1.amazonaws.com"
      arn      = "arn:aws:elasticloadbalancing:us-east-1:123456789012:loadbalancer/net/floe-nlb/0123456789"
    }
  }
  mock_resource "aws_sns_topic" {
    defaults = {
      arn = "arn:aws:sns:us-east-1:123456789012:floe-alarms"
    }
  }
  mock_resource "aws_lb_target_group" {
    defaults = {
      arn = "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/floe/0123456789"
    }
  }
  mock_resource "aws_iam_role" {
    defaults = {
      arn = "arn:aws:iam::123456789012:role/floe"
    }
  }
  mock_resource "aws_ecs_cluster" {
    defaults = {
      arn = "arn:aws:ecs:us-east-1:123456789012:cluster/floe"
      id  = "arn:aws:ecs:us-east-1:123456789012:cluster/floe"
    }
  }
  mock_resource "aws_ecs_task_definition" {
    defaults = {
      arn = "arn:aws:ecs:us-east-1:123456789012:task-definition/floe-agent:1"
    }
  }
  mock_resource "aws_cloudwatch_log_group" {
    defaults = {
      arn = "arn:aws:logs:us-east-1:123456789012:log-group:/ecs/floe"
    }
  }
  mock_resource "aws_s3_bucket" {
    defaults = {
      bucket = "floe-objects-test"
      arn    = "arn:aws:s3:::floe-objects-test"
    }
  }
  mock_resource "aws_secretsmanager_secret" {
    defaults = {
      arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:floe/unnamed"
    }
  }
  mock_resource "aws_db_instance" {
    defaults = {
      address = "floe-metastore.abc.us-east-1.rds.amazonaws.com"
      port    = 5432
    }
  }
}

# One ARN per secret, so the booting test knows which value each injected name gets.
override_resource {
  target = aws_secretsmanager_secret.metastore_dsn
  values = { arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:floe/metastore-dsn" }
}
override_resource {
  target = aws_secretsmanager_secret.internal_token
  values = { arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:floe/internal-token" }
}
override_resource {
  target = aws_secretsmanager_secret.sasl_users
  values = { arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:floe/sasl-users" }
}
override_resource {
  target = aws_secretsmanager_secret.tls["certificate"]
  values = { arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:floe/tls-certificate" }
}
override_resource {
  target = aws_secretsmanager_secret.tls["private-key"]
  values = { arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:floe/tls-private-key" }
}

variables {
  vpc_id = "vpc-0123456789abcdef0"
  agent_subnets = {
    "us-east-1a" = "subnet-0aaaaaaaaaaaaaaaa"
    "us-east-1b" = "subnet-0bbbbbbbbbbbbbbbb"
  }
  client_cidr_blocks  = ["10.0.0.0/8"]
  agent_image         = "123456789012.dkr.ecr.us-east-1.amazonaws.com/floe:0.1.0"
  db_password         = "test-password-0123456789"
  internal_token      = "test-internal-token-0123456789abcdef"
  tls_certificate_pem = "-----BEGIN CERTIFICATE-----\ntest\n-----END CERTIFICATE-----\n"
  tls_private_key_pem = "-----BEGIN PRIVATE KEY-----\ntest\n-----END PRIVATE KEY-----\n"
  sasl_users_json     = "{\"admin\":\"admin-secret\"}"
  enable_tls          = true
  enable_sasl         = true
  super_users         = ["User:admin"]
  enable_alarms       = false
}

run "secure_boot" {
  command = apply

  assert {
    condition = alltrue([
      for c in jsondecode(aws_ecs_task_definition.agent["us-east-1a"].container_definitions) : c.readonlyRootFilesystem
    ])
    error_message = "every container of the agent task keeps a read-only root filesystem"
  }

  assert {
    condition = (
      [for v in aws_ecs_task_definition.agent["us-east-1a"].volume : v.name] == ["tls"]
      && [for c in jsondecode(aws_ecs_task_definition.agent["us-east-1a"].container_definitions) : c.name] == ["tls-volume-init", "agent"]
    )
    error_message = "enable_tls adds the TLS volume and its init container"
  }

  assert {
    condition = (
      jsondecode(aws_ecs_task_definition.agent["us-east-1a"].container_definitions)[1].mountPoints
      == [{ sourceVolume = "tls", containerPath = "/var/lib/floe/tls", readOnly = false }]
      && jsondecode(aws_ecs_task_definition.agent["us-east-1a"].container_definitions)[1].dependsOn
      == [{ containerName = "tls-volume-init", condition = "SUCCESS" }]
      && jsondecode(aws_ecs_task_definition.agent["us-east-1a"].container_definitions)[1].user == "10001:10001"
    )
    error_message = "the agent (as 10001) mounts the TLS volume where FLOE_SSL_CERTFILE points, after the init container succeeded"
  }

  assert {
    condition = alltrue([
      for e in [
        { name = "FLOE_AUTHORIZER", value = "acl" },
        { name = "FLOE_SUPER_USERS", value = "User:admin" },
        { name = "FLOE_ALLOW_EVERYONE_IF_NO_ACL_FOUND", value = "false" },
        { name = "FLOE_SSL_CERTFILE", value = "/var/lib/floe/tls/cert.pem" },
        { name = "FLOE_SSL_KEYFILE", value = "/var/lib/floe/tls/key.pem" },
        { name = "FLOE_LISTENERS", value = "SASL_SSL://0.0.0.0:9092" },
      ] : contains(jsondecode(aws_ecs_task_definition.agent["us-east-1a"].container_definitions)[1].environment, e)
    ])
    error_message = "SASL_SSL with the ACL authorizer on by default, admin as super user, TLS files in the volume"
  }

  assert {
    condition = (
      jsondecode(aws_ecs_task_definition.agent["us-east-1a"].container_definitions)[1].secrets
      == [
        { name = "FLOE_METASTORE", valueFrom = "arn:aws:secretsmanager:us-east-1:123456789012:secret:floe/metastore-dsn" },
        { name = "FLOE_PEER_TOKEN", valueFrom = "arn:aws:secretsmanager:us-east-1:123456789012:secret:floe/internal-token" },
        { name = "FLOE_SASL_USERS", valueFrom = "arn:aws:secretsmanager:us-east-1:123456789012:secret:floe/sasl-users" },
        { name = "TLS_CERT_PEM", valueFrom = "arn:aws:secretsmanager:us-east-1:123456789012:secret:floe/tls-certificate" },
        { name = "TLS_KEY_PEM", valueFrom = "arn:aws:secretsmanager:us-east-1:123456789012:secret:floe/tls-private-key" },
      ]
      && !can(jsondecode(aws_ecs_task_definition.agent["us-east-1a"].container_definitions)[0].secrets)
    )
    error_message = "the agent gets its secrets from Secrets Manager; the root init container gets none"
  }
}
