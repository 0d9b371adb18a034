# The journal tier (issue 40) against the mocked AWS provider: off by default
# (no directory buckets, no FLOE_JOURNAL); with three zone IDs, one S3 Express One
# Zone directory bucket per zone named <base>--<zone id>--x-s3, FLOE_JOURNAL with
# one URL per bucket and FLOE_JOURNAL_QUORUM for the agents and the compactor,
# and s3express:CreateSession on exactly those buckets; impossible quorums and
# repeated zones are rejected at plan time.

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
  # The provider still validates ARN-typed arguments: give referenced ARNs a real shape.
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
      arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:floe/metastore-dsn-abc"
    }
  }
  mock_resource "aws_db_instance" {
    defaults = {
      address = "floe-metastore.abc.us-east-1.rds.amazonaws.com"
      port    = 5432
    }
  }
  mock_resource "aws_rds_cluster" {
    defaults = {
      endpoint = "floe-metastore.cluster-abc.us-east-1.rds.amazonaws.com"
      port     = 5432
    }
  }
}

override_resource {
  target = aws_s3_directory_bucket.journal["use1-az4"]
  values = { arn = "arn:aws:s3express:us-east-1:123456789012:bucket/floe-journal--use1-az4--x-s3" }
}
override_resource {
  target = aws_s3_directory_bucket.journal["use1-az5"]
  values = { arn = "arn:aws:s3express:us-east-1:123456789012:bucket/floe-journal--use1-az5--x-s3" }
}
override_resource {
  target = aws_s3_directory_bucket.journal["use1-az6"]
  values = { arn = "arn:aws:s3express:us-east-1:123456789012:bucket/floe-journal--use1-az6--x-s3" }
}

variables {
  vpc_id = "vpc-0123456789abcdef0"
  agent_subnets = {
    "us-east-1a" = "subnet-0aaaaaaaaaaaaaaaa"
    "us-east-1b" = "subnet-0bbbbbbbbbbbbbbbb"
    "us-east-1c" = "subnet-0cccccccccccccccc"
  }
  client_cidr_blocks  = ["10.0.0.0/8"]
  agent_image         = "123456789012.dkr.ecr.us-east-1.amazonaws.com/floe:0.1.0"
  db_password         = "test-password-0123456789"
  internal_token      = "test-internal-token-0123456789abcdef"
  tls_certificate_pem = "-----BEGIN CERTIFICATE-----\ntest\n-----END CERTIFICATE-----\n"
  tls_private_key_pem = "-----BEGIN PRIVATE KEY-----\ntest\n-----END PRIVATE KEY-----\n"
  # Ephemeral inputs must be set in both the plan and apply phases of a test run.
  sasl_users_json = "{}"
}

run "no_journal_by_default" {
  command = apply

  variables {
    enable_compactor            = true
    s3_endpoint_route_table_ids = ["rtb-0123456789abcdef0"]
  }

  assert {
    condition = (
      length(aws_s3_directory_bucket.journal) == 0
      && length(aws_s3_bucket_lifecycle_configuration.journal) == 0
      && length(aws_vpc_endpoint.s3express) == 0
      && output.journal_urls == []
    )
    error_message = "no journal_zones: no directory buckets, lifecycle rules or S3 Express endpoint"
  }

  assert {
    condition = alltrue(flatten([
      for cdef in concat(
        [for zone in ["us-east-1a", "us-east-1b", "us-east-1c"] : aws_ecs_task_definition.agent[zone].container_definitions],
        [aws_ecs_task_definition.compactor[0].container_definitions],
      ) : [for e in jsondecode(cdef)[0].environment : !startswith(e.name, "FLOE_JOURNAL")]
    ]))
    error_message = "without a journal neither the agents nor the compactor get FLOE_JOURNAL or FLOE_JOURNAL_QUORUM"
  }

  assert {
    condition     = !anytrue([for s in data.aws_iam_policy_document.objects.statement : contains(s.actions, "s3express:CreateSession")])
    error_message = "without a journal the task roles get no S3 Express permission"
  }
}

run "three_zone_journal" {
  command = apply

  variables {
    journal_zones               = ["use1-az4", "use1-az5", "use1-az6"]
    journal_bucket_base         = "floe-journal"
    enable_compactor            = true
    s3_endpoint_route_table_ids = ["rtb-0123456789abcdef0"]
  }

  assert {
    condition = (
      [for zone in ["use1-az4", "use1-az5", "use1-az6"] : aws_s3_directory_bucket.journal[zone].bucket]
      == ["floe-journal--use1-az4--x-s3", "floe-journal--use1-az5--x-s3", "floe-journal--use1-az6--x-s3"]
    )
    error_message = "one directory bucket per zone ID, named <base>--<zone id>--x-s3"
  }

  assert {
    condition = alltrue([
      for zone in ["use1-az4", "use1-az5", "use1-az6"] :
      one(aws_s3_directory_bucket.journal[zone].location).name == zone
      && one(aws_s3_directory_bucket.journal[zone].location).type == "AvailabilityZone"
      && aws_s3_directory_bucket.journal[zone].data_redundancy == "SingleAvailabilityZone"
    ])
    error_message = "each journal bucket lives in its own zone (S3 Express One Zone)"
  }

  assert {
    condition = alltrue([
      for zone in ["us-east-1a", "us-east-1b", "us-east-1c"] :
      contains(jsondecode(aws_ecs_task_definition.agent[zone].container_definitions)[0].environment, {
        name  = "FLOE_JOURNAL"
        value = "s3://floe-journal--use1-az4--x-s3/floe?region=us-east-1,s3://floe-journal--use1-az5--x-s3/floe?region=us-east-1,s3://floe-journal--use1-az6--x-s3/floe?region=us-east-1"
      })
      && contains(jsondecode(aws_ecs_task_definition.agent[zone].container_definitions)[0].environment, { name = "FLOE_JOURNAL_QUORUM", value = "2" })
    ])
    error_message = "every zone's agents get FLOE_JOURNAL (three URLs, in journal_zones order) and FLOE_JOURNAL_QUORUM = 2"
  }

  assert {
    condition = length(split(",", [
      for e in jsondecode(aws_ecs_task_definition.agent["us-east-1a"].container_definitions)[0].environment : e.value if e.name == "FLOE_JOURNAL"
    ][0])) == 3
    error_message = "FLOE_JOURNAL holds one URL per journal bucket"
  }

  assert {
    condition = (
      contains(jsondecode(aws_ecs_task_definition.compactor[0].container_definitions)[0].environment, { name = "FLOE_JOURNAL", value = join(",", output.journal_urls) })
      && contains(jsondecode(aws_ecs_task_definition.compactor[0].container_definitions)[0].environment, { name = "FLOE_JOURNAL_QUORUM", value = "2" })
    )
    error_message = "the compactor reads the same journal as the agents"
  }

  assert {
    condition = anytrue([
      for s in data.aws_iam_policy_document.objects.statement :
      s.actions == toset(["s3express:CreateSession"])
      && s.resources == toset([
        "arn:aws:s3express:us-east-1:123456789012:bucket/floe-journal--use1-az4--x-s3",
        "arn:aws:s3express:us-east-1:123456789012:bucket/floe-journal--use1-az5--x-s3",
        "arn:aws:s3express:us-east-1:123456789012:bucket/floe-journal--use1-az6--x-s3",
      ])
    ])
    error_message = "the task roles may open S3 Express sessions on the three journal buckets, and only on them"
  }

  assert {
    condition     = aws_iam_role_policy.agent_objects.policy == data.aws_iam_policy_document.objects.json && aws_iam_role_policy.compactor_objects[0].policy == data.aws_iam_policy_document.objects.json
    error_message = "the agent and compactor task roles carry the policy with the journal statement"
  }

  assert {
    condition = alltrue([
      for zone in ["use1-az4", "use1-az5", "use1-az6"] :
      [
        for r in aws_s3_bucket_lifecycle_configuration.journal[zone].rule :
        [one(r.expiration).days, one(r.filter).prefix] if r.id == "expire-journal-leftovers"
      ] == [[7, "floe/"]]
      && length([
        for r in aws_s3_bucket_lifecycle_configuration.journal[zone].rule :
        r if r.id == "abort-incomplete-multipart-uploads" && length(r.abort_incomplete_multipart_upload) == 1
      ]) == 1
    ])
    error_message = "each journal bucket expires leftovers under the prefix after 7 days and aborts incomplete uploads"
  }

  assert {
    condition     = one(one(aws_s3_bucket_server_side_encryption_configuration.journal["use1-az5"].rule).apply_server_side_encryption_by_default).sse_algorithm == "AES256"
    error_message = "journal buckets are encrypted (SSE-S3 without kms_key_arn)"
  }

  assert {
    condition     = length(aws_vpc_endpoint.s3express) == 1 && aws_vpc_endpoint.s3express[0].service_name == "com.amazonaws.us-east-1.s3express"
    error_message = "with route tables given, the S3 Express gateway endpoint joins the S3 one"
  }
}

run "default_bucket_base_fits" {
  command = apply

  variables {
    name           = "floe-production-cluster"
    journal_zones  = ["use1-az4", "use1-az5"]
    journal_quorum = 2
  }

  assert {
    condition = alltrue([
      for zone in ["use1-az4", "use1-az5"] :
      can(regex("^floe-production-cluster-journal-[0-9a-f]{8}--${zone}--x-s3$", aws_s3_directory_bucket.journal[zone].bucket))
      && length(aws_s3_directory_bucket.journal[zone].bucket) <= 63
    ])
    error_message = "the default base is <name>-journal-<8 hex of the object bucket name> and fits the 63-character limit"
  }
}

run "quorum_larger_than_zones_is_rejected" {
  command = plan

  variables {
    journal_zones  = ["use1-az4", "use1-az5"]
    journal_quorum = 3
  }

  expect_failures = [var.journal_quorum]
}

run "repeated_zone_is_rejected" {
  command = plan

  variables {
    journal_zones = ["use1-az4", "use1-az4", "use1-az5"]
  }

  expect_failures = [var.journal_zones]
}

run "zone_names_are_rejected" {
  command = plan

  variables {
    journal_zones = ["us-east-1a", "us-east-1b"]
  }

  expect_failures = [var.journal_zones]
}

run "journal_with_kms_key" {
  command = plan

  variables {
    journal_zones       = ["use1-az4", "use1-az5", "use1-az6"]
    journal_bucket_base = "floe-journal"
    kms_key_arn         = "arn:aws:kms:us-east-1:123456789012:key/11111111-2222-3333-4444-555555555555"
  }

  assert {
    condition = alltrue([
      for zone in ["use1-az4", "use1-az5", "use1-az6"] :
      one(one(aws_s3_bucket_server_side_encryption_configuration.journal[zone].rule).apply_server_side_encryption_by_default).sse_algorithm == "aws:kms"
      && one(aws_s3_bucket_server_side_encryption_configuration.journal[zone].rule).bucket_key_enabled
    ])
    error_message = "with kms_key_arn the journal buckets use SSE-KMS with bucket keys (required for directory buckets)"
  }
}

run "journal_expiration_shorter_than_two_days_is_rejected" {
  command = plan

  variables {
    journal_zones           = ["use1-az4", "use1-az5", "use1-az6"]
    journal_expiration_days = 1
  }

  expect_failures = [var.journal_expiration_days]
}
